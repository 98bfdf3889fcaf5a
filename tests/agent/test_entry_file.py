"""The entry file of real run commands (the file the matmul-precision rule edits)."""

from __future__ import annotations

import pytest

from agent.migration.entry import entry_file

KNOWN = ["train.py", "scripts/train.py", "tutorials/lm/main.py", "tutorials/lm/data_utils.py",
         "projects/adder/adder.py", "pkg/__main__.py", "pkg/models.py", "tests/test_model.py"]


@pytest.mark.parametrize(("command", "expected"), [
    ("python train.py --steps 8", "train.py"),
    ("python ./train.py", "train.py"),
    ("python -u scripts/train.py --lr 0.1", "scripts/train.py"),
    ("PYTHONPATH=. OMP_NUM_THREADS=1 python scripts/train.py", "scripts/train.py"),
    # the language model of yunjey/pytorch-tutorial: was None, so the precision rule never fired
    ("cd tutorials/lm && python main.py", "tutorials/lm/main.py"),
    ("cd tutorials/lm; python main.py --epochs 1", "tutorials/lm/main.py"),
    ("cd tutorials && cd lm && python ../lm/main.py", "tutorials/lm/main.py"),
    ("python -m projects.adder.adder --trainer.max_iters=2", "projects/adder/adder.py"),
    ("python -m pkg --epochs 1", "pkg/__main__.py"),
    ("cd tutorials/lm && python -m main", "tutorials/lm/main.py"),
    ("torchrun --standalone --nproc_per_node=2 train.py --epochs 2", "train.py"),
    ("python -m torch.distributed.run --nproc_per_node=2 train.py", "train.py"),
    ("mkdir -p out && python train.py > out/log.txt", "train.py"),
])
def test_the_script_a_command_runs_first(command: str, expected: str) -> None:
    assert entry_file(command, KNOWN) == expected


@pytest.mark.parametrize("command", [
    "python -c 'import train; train.main()'",   # no file runs first
    "python -m pytest -q tests",                # the tests, not the program
    "python -m pytest tests/test_model.py",
    "cd .. && python train.py",                 # outside the repository
    "python /opt/other/train.py",
    "python missing.py",
    "python 'unbalanced",                       # not parseable: no guess
    "cd",
])
def test_no_entry_file_where_none_is_shown(command: str) -> None:
    assert entry_file(command, KNOWN) is None


@pytest.mark.parametrize(("command", "start", "expected"), [
    ("python main.py", "tutorials/lm", "tutorials/lm/main.py"),  # --cwd tutorials/lm
    ("python ../lm/main.py", "tutorials/lm", "tutorials/lm/main.py"),
    ("python -m main", "tutorials/lm", "tutorials/lm/main.py"),
    ("python train.py", ".", "train.py"),
    ("python main.py", None, None),  # from the root there is no main.py
])
def test_the_entry_file_is_found_from_the_runs_working_directory(command: str, start: str | None,
                                                                 expected: str | None) -> None:
    assert entry_file(command, KNOWN, start) == expected


@pytest.mark.parametrize(("command", "expected"), [
    ("python run_notebook.py denoising_autoencoder.ipynb", ["denoising_autoencoder.ipynb"]),
    ("cd nbs && papermill train.ipynb ../out.ipynb -p STEPS 2", ["nbs/train.ipynb"]),
    ("python run_notebook.py missing.ipynb", []),
    ("python train.py", []),
    ("python run_notebook.py ../elsewhere.ipynb", []),
])
def test_the_notebooks_a_command_names(command: str, expected: list[str]) -> None:
    from agent.migration.entry import notebooks_named

    assert notebooks_named(command, [*KNOWN, "denoising_autoencoder.ipynb", "nbs/train.ipynb", "run_notebook.py"]) \
        == expected
