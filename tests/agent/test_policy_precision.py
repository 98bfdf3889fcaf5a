"""The matmul-precision fix (matmul_precision_highest, FIX008) applies to the target device only and
is not undone by the program's own (or a codemod's) precision lines."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from agent.policy import Proposal, propose
from agent.policy.base import Diagnosis, FixContext, UserFrame
from tools.codemods.engine import analyze
from tools.parity.models import ParityReport

ROOT = Path(__file__).resolve().parents[2]

# what tf32_cudnn_flags' train.py starts with: the CUDA speed flags at module level, below the imports
TRAIN = '''"""Train with the usual speed flags."""

import torch
import torch.backends.cudnn as cudnn

torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
cudnn.benchmark = True

if __name__ == "__main__":
    print("precision", torch.get_float32_matmul_precision(), "cudnn_tf32", torch.backends.cudnn.allow_tf32)
'''


def _unlocalised_failure() -> Diagnosis:
    report = ParityReport(verdict="fail", summary="parity FAIL", ref_dir="/r", target_dir="/t", counts={"fail": 1},
                          first_divergence=None, modules=[], tensors=[], scalars=[])
    return Diagnosis(phase="parity", kind="parity_failed", parity=report)


def _patched(tmp_path: Path) -> str:
    rewritten = analyze(TRAIN).new_source
    (tmp_path / "train.py").write_text(rewritten)
    ctx = FixContext(source=tmp_path, known_files=["train.py"], entry_file="train.py")
    p = propose(_unlocalised_failure(), ctx)
    assert isinstance(p, Proposal) and p.rule == "matmul_precision_highest"
    return p.files["train.py"]


def _run(path: Path, *, tpx: bool) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_DEVICE_BACKEND_AUTOLOAD", "TPX_"))}
    env.update({"TORCH_DEVICE_BACKEND_AUTOLOAD": "1" if tpx else "0", "PYTHONPATH": str(ROOT),
                "CUDA_VISIBLE_DEVICES": ""})
    res = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=120, env=env,
                         cwd=path.parent)
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout.strip()


def test_codemods_write_one_matmul_precision_line_and_keep_the_cudnn_flag():
    out = analyze(TRAIN).new_source
    # before: cudnn.allow_tf32 = True became a second set_float32_matmul_precision("high")
    assert out.count('torch.set_float32_matmul_precision("high")') == 1
    assert "torch.backends.cudnn.allow_tf32 = True\n" in out


def test_fix_goes_below_the_programs_precision_lines_and_guards_for_the_target(tmp_path):
    new = _patched(tmp_path)
    lines = new.splitlines()
    high = lines.index('torch.set_float32_matmul_precision("high")')
    guard = next(i for i, line in enumerate(lines) if line.startswith("if torch.accelerator.is_available()"))
    assert guard > high and guard > lines.index("torch.backends.cudnn.allow_tf32 = True")  # nothing later undoes it
    assert '.type == "tpx"' in lines[guard]
    # what Ferry inserts is no CUDA idiom left over: a scan of the patched file finds nothing on those lines
    assert "cuda" not in (lines[guard] + lines[guard + 1]).lower()
    assert not [f for f in analyze(new).findings if f.line in (guard + 1, guard + 2)] and lines[guard + 1].startswith(
        '    torch.set_float32_matmul_precision("highest")')


def test_patched_program_runs_highest_on_tpx_and_keeps_its_own_setting_elsewhere(tmp_path):
    path = tmp_path / "patched.py"
    path.write_text(_patched(tmp_path))
    # on tpx (the target) the fix wins over the program's "high" (it used to be inserted above it and be undone)
    assert _run(path, tpx=True) == "precision highest cudnn_tf32 True"
    # without the target accelerator the program's own choice stands (on real CUDA: TF32 stays on)
    assert _run(path, tpx=False) == "precision high cudnn_tf32 True"


def test_fix_is_applied_once(tmp_path):
    new = _patched(tmp_path)
    (tmp_path / "train.py").write_text(new)
    ctx = FixContext(source=tmp_path, known_files=["train.py"], entry_file="train.py")
    assert propose(_unlocalised_failure(), ctx) is None


def test_edits_that_change_a_dtype_tell_parity_which(tmp_path):
    from agent.migration.nodes.common import dtype_changes_of
    from agent.migration.nodes.rewrite import _dtype_changes
    from agent.migration.records import Edit

    assert _dtype_changes(["FRY001", "FRY029"]) == {"float64": "float32"}
    assert _dtype_changes(["FRY001", "FRY030"]) == {}
    edits = [Edit(step="rewrite", kind="codemod", rule="FRY001", files=["a.py"], diff="", reason="r"),
             Edit(step="fix-1", kind="policy", rule="float64_to_float32", files=["a.py"], diff="", reason="r",
                  dtype_changes={"float64": "float32"})]
    assert dtype_changes_of({"edits": [e.model_dump(mode="json") for e in edits]}) == {"float64": "float32"}
    assert dtype_changes_of({"edits": [edits[0].model_dump(mode="json")]}) == {}


def test_precision_set_in_a_function_or_the_main_guard_is_named_and_not_passed_over():
    from tools.codemods.fixes import target_matmul_precision

    src = ('import torch\n\n\ndef setup():\n    torch.backends.cuda.matmul.allow_tf32 = True\n\n\n'
           'if __name__ == "__main__":\n    torch.set_float32_matmul_precision("high")\n    setup()\n'
           'torch.backends.cudnn.allow_tf32 = True\n')
    result = target_matmul_precision(src)
    assert result is not None and result.changed
    # right after the imports: never below the main guard, whose code has run by then
    assert result.source.splitlines()[1].startswith("if torch.accelerator.is_available()")
    assert len(result.warnings) == 3
    assert "setup (line 4) also sets a float32 precision" in result.warnings[0]
    assert "the main guard (line 8)" in result.warnings[1]
    assert "a statement after the main guard (line 11)" in result.warnings[2]


# a repository's own test, as the codemods leave it: float32 results compared with assert_close on the device
ASSERT_CLOSE_TEST = '''import torch

device = torch.accelerator.current_accelerator(check_available=True) or torch.device("cpu")


def test_matmul_is_float32_exact():
    torch.manual_seed(0)
    x, w = torch.randn(64, 64, device=device), torch.randn(64, 64, device=device)
    expected = (x.cpu() @ w.cpu()).to(device)
    torch.testing.assert_close(x @ w, expected, rtol=1e-4, atol=1e-4)
'''


NOT_CLOSE = ("Tensor-likes are not close!\n\nMismatched elements: 9 / 4096 (0.2%)\n"
             "Greatest absolute difference: 0.0103 at index (3, 7) (up to 0.0001 allowed)\n"
             "Greatest relative difference: 0.0041 at index (3, 7) (up to 0.0001 allowed)")


def _not_close(file: str, message: str = NOT_CLOSE) -> Diagnosis:
    return Diagnosis(phase="test", kind="other", exc_type="AssertionError", message=message,
                     frames=[UserFrame(file=file, line=10, function="test_matmul_is_float32_exact")])


def _pytest_on_tpx(repo: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_DEVICE_BACKEND_AUTOLOAD", "TPX_"))}
    env.update({"TORCH_DEVICE_BACKEND_AUTOLOAD": "1", "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": ""})
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
                          capture_output=True, text=True, timeout=180, env=env, cwd=repo)


def test_a_test_failing_assert_close_on_tpx_gets_full_fp32_matmuls_in_its_module(tmp_path):
    """A program trained under autocast passes parity without the precision fix; its own float32 test then
    fails on tpx (bf16 matmul inputs) and the fix goes into that test's module, once."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_mm.py").write_text(ASSERT_CLOSE_TEST)
    before = _pytest_on_tpx(tmp_path)
    assert before.returncode == 1 and "Tensor-likes are not close" in before.stdout, before.stdout[-2000:]
    ctx = FixContext(source=tmp_path, known_files=["train.py", "tests/test_mm.py"], entry_file="train.py")
    p = propose(_not_close("tests/test_mm.py"), ctx)
    assert isinstance(p, Proposal) and p.rule == "test_tolerance_matmul_precision" and p.site == "tests/test_mm.py:1"
    assert list(p.files) == ["tests/test_mm.py"] and '.type == "tpx"' in p.files["tests/test_mm.py"]
    (tmp_path / "tests" / "test_mm.py").write_text(p.files["tests/test_mm.py"])
    res = _pytest_on_tpx(tmp_path)
    assert res.returncode == 0, res.stdout[-2000:]
    ctx = FixContext(source=tmp_path, known_files=["train.py", "tests/test_mm.py"], entry_file="train.py",
                     tried=[f"{p.rule}@{p.site}"])
    assert propose(_not_close("tests/test_mm.py"), ctx) is None  # applied already: nothing more to offer


def test_other_test_failures_get_no_precision_fix(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_mm.py").write_text(ASSERT_CLOSE_TEST)
    ctx = FixContext(source=tmp_path, known_files=["tests/test_mm.py"], entry_file=None)
    assert propose(_not_close("tests/test_mm.py", "assert 3 == 4"), ctx) is None  # not assert_close's mismatch
    far = NOT_CLOSE.replace("relative difference: 0.0041", "relative difference: 0.9")
    assert propose(_not_close("tests/test_mm.py", far), ctx) is None  # far beyond what bf16 rounding explains
    assert propose(_not_close("site-packages/lib.py"), ctx) is None  # not the repository's file


# notebook_training's shape: a runner script that imports no torch runs the notebook's cells in one namespace
RUNNER = '''import json, sys
namespace = {"__name__": "__main__"}
for cell in json.load(open(sys.argv[1]))["cells"]:
    src = "".join(cell["source"])
    if cell["cell_type"] == "code" and not src.startswith("!"):
        exec("\\n".join(src.splitlines()[1:]) if src.startswith("%%time") else src, namespace)
'''


def _notebook(*sources: str) -> str:
    import json

    cells = [{"cell_type": "markdown", "metadata": {}, "source": ["# a notebook\n"]}]
    cells += [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
               "source": s.splitlines(keepends=True)} for s in sources]
    return json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, indent=1,
                      ensure_ascii=False) + "\n"


def test_a_notebook_runner_gets_the_fix_in_the_notebooks_first_cell_that_imports_torch(tmp_path):
    import json

    from agent.migration.entry import notebooks_named

    nb = _notebook("!nvidia-smi\n", "SEED = 0\n",
                   "%%time\nimport torch\ntorch.set_float32_matmul_precision('high')\nx = torch.ones(2)  # café\n",
                   "print('precision', torch.get_float32_matmul_precision())\n")
    (tmp_path / "run_notebook.py").write_text(RUNNER)
    (tmp_path / "nb.ipynb").write_text(nb, encoding="utf-8")
    known = ["nb.ipynb", "run_notebook.py"]
    ctx = FixContext(source=tmp_path, known_files=known, entry_file="run_notebook.py",
                     notebooks=notebooks_named("python run_notebook.py nb.ipynb", known))
    p = propose(_unlocalised_failure(), ctx)
    # before: the entry does not import torch, so the rule had nowhere to write ("no rule left": partial)
    assert isinstance(p, Proposal) and p.rule == "matmul_precision_highest" and list(p.files) == ["nb.ipynb"]
    assert p.site == "nb.ipynb:1" and "cell 3" in p.reason
    before, after = json.loads(nb)["cells"], json.loads(p.files["nb.ipynb"])["cells"]
    assert [c for i, c in enumerate(after) if i != 3] == [c for i, c in enumerate(before) if i != 3]
    cell = after[3]["source"]
    assert cell[:3] == before[3]["source"][:3] and cell[-1] == "x = torch.ones(2)  # café\n"
    assert 'torch.set_float32_matmul_precision("highest")' in "".join(cell[3:])  # below the program's "high"
    (tmp_path / "nb.ipynb").write_text(p.files["nb.ipynb"], encoding="utf-8")
    for tpx, want in ((True, "precision highest"), (False, "precision high")):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_DEVICE_BACKEND_AUTOLOAD", "TPX_"))}
        env.update({"TORCH_DEVICE_BACKEND_AUTOLOAD": "1" if tpx else "0", "PYTHONPATH": str(ROOT)})
        res = subprocess.run([sys.executable, "run_notebook.py", "nb.ipynb"], capture_output=True, text=True,
                             timeout=120, env=env, cwd=tmp_path)
        assert res.returncode == 0, res.stderr[-2000:]
        assert res.stdout.strip() == want  # tpx only: elsewhere the program's own choice stands
    ctx = FixContext(source=tmp_path, known_files=known, entry_file="run_notebook.py", notebooks=["nb.ipynb"])
    assert propose(_unlocalised_failure(), ctx) is None  # applied once


def _drift_passed(removed_by: dict[str, str] | None) -> ParityReport:
    from tools.parity.models import CauseTrial

    trials = [] if removed_by is None else [CauseTrial(
        cause="matmul_precision", setting="'highest'", env=removed_by, against="reference", verdict="pass",
        before_key="Net.fc#1:out", before_max_abs=2e-3, after_max_abs=0.0, drift=True)]
    return ParityReport(verdict="pass", summary="parity passes (drift budget)", ref_dir="/r", target_dir="/t",
                        counts={"pass": 3}, modules=[], tensors=[], scalars=[], trials=trials)


def test_tests_that_fail_after_a_drift_the_side_run_made_exact_get_full_fp32_matmuls(tmp_path: Path):
    (tmp_path / "train.py").write_text(TRAIN)
    ctx = FixContext(source=tmp_path, known_files=["train.py"], entry_file="train.py")
    failing_test = Diagnosis(phase="test", kind="other", frames=[UserFrame(file="tests/test_x.py", line=3)],
                             parity=_drift_passed({"TPX_MATMUL_PRECISION": "highest"}))
    proposal = propose(failing_test, ctx)
    assert isinstance(proposal, Proposal) and proposal.rule == "matmul_precision_highest"
    assert "train.py" in proposal.files and "passed by the drift budget" in proposal.reason
    assert "the later steps' drift (Net.fc#1:out) disappears" in proposal.reason
    # no measurement that 'highest' makes it exact, another measured setting, or a failure that is no test's:
    # nothing (the model or a person judges)
    for diag in (failing_test.model_copy(update={"parity": _drift_passed(None)}),
                 failing_test.model_copy(update={"parity": _drift_passed({"TPX_AUTOCAST": "off"})}),
                 failing_test.model_copy(update={"phase": "run"})):
        assert propose(diag, ctx) is None
    # tried once: with the setting in the file already, not again
    (tmp_path / "train.py").write_text(proposal.files["train.py"])
    assert propose(failing_test, ctx) is None
