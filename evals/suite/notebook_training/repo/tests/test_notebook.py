import json

from run_notebook import code_cells, run_notebook, to_python

NOTEBOOK = "denoising_autoencoder.ipynb"


def test_the_notebook_trains_the_autoencoder():
    ns = run_notebook(NOTEBOOK, {"STEPS": 30})
    assert len(ns["losses"]) == 30
    assert ns["losses"][-1] < ns["losses"][0]
    assert ns["recon_error"] < ns["noisy_error"]


def test_magics_and_shell_lines_are_not_python():
    code, timed = to_python("%%time\nx = 1\n!ls\nif x:\n    %matplotlib inline")
    assert timed
    assert code.splitlines()[0] == "x = 1"
    compile(code, "<cell>", "exec")
    assert to_python("%%bash\necho hi") == (None, False)


def test_the_notebook_has_a_parameters_cell():
    tagged = [tags for _, tags, _ in code_cells(NOTEBOOK) if "parameters" in tags]
    assert len(tagged) == 1
    with open(NOTEBOOK) as f:
        assert json.load(f)["nbformat"] == 4
