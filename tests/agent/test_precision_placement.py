"""The precision fix where the run command names no file of the repository (issue 33, item 7).

The fixture (tests/agent/fixtures/precision_start) trains a float32 MLP in ``pkg/train.py``: on tpx its
matmuls round their inputs to bf16, so parity fails at the first Linear (likely matmul_precision) until
``torch.set_float32_matmul_precision("highest")`` is set for tpx in the module that trains. Each command
shape below names no file that imports torch (``python -c``, a shell script, a console-script shim) or a
module (``python -m``): the fix goes into the first repository module the run executes that imports torch,
as the reference run's probe dump lists them (``meta.files_run``), and the migration ends ``migrated``.

Real ``ferry migrate`` subprocesses: the real runner, sandbox, probe, codemods and tpx backend.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agent.policy.base import FixContext
from tools.probe.dump import files_run

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = Path(__file__).with_name("fixtures") / "precision_start"

COMMANDS = {
    "python -c": "python -c 'from pkg.train import main; main()'",
    "python -m": "python -m pkg.train",
    "bash script": "bash scripts/train.sh",
    "console script": "python bin/train",
}


def _migrate(tmp_path: Path, command: str) -> dict:
    repo = tmp_path / "repo"
    shutil.copytree(FIXTURE, repo, ignore=shutil.ignore_patterns("__pycache__"))
    env = {k: v for k, v in os.environ.items() if k != "FERRY_DATABASE_URL"}
    res = subprocess.run(
        [sys.executable, "-m", "agent.cli", "migrate", str(repo), "--run", command, "--json",
         "--state-dir", str(tmp_path / "state"), "--out", str(tmp_path / "out")],
        cwd=ROOT, capture_output=True, text=True, timeout=900, env=env)
    assert res.returncode in (0, 1), res.stdout[-3000:] + res.stderr[-3000:]
    assert (repo / "pkg" / "train.py").read_text() == (FIXTURE / "pkg" / "train.py").read_text()  # untouched
    return json.loads(res.stdout)


@pytest.mark.slow
@pytest.mark.parametrize("shape", list(COMMANDS))
def test_precision_fix_goes_into_the_first_module_the_run_executes(tmp_path, shape):
    result = _migrate(tmp_path, COMMANDS[shape])
    assert result["status"] == "migrated", result["summary"]
    assert result["parity"]["passed"] is True
    precision = [e for e in result["edits"] if e["rule"] == "matmul_precision_highest"]
    assert [e["files"] for e in precision] == [["pkg/train.py"]], result["edits"]
    patch = (tmp_path / "out" / "ferry.patch").read_text()
    assert "+++ b/pkg/train.py" in patch and 'torch.set_float32_matmul_precision("highest")' in patch
    assert "pkg/__init__.py" not in patch and "bin/train" not in patch  # they import no torch


def test_program_files_start_with_the_entry_then_the_run_order(tmp_path):
    known = ["pkg/__init__.py", "pkg/train.py", "train.py"]
    ran = ["bin/train", "pkg/__init__.py", "pkg/train.py", "../elsewhere.py"]
    ctx = FixContext(source=tmp_path, known_files=known, files_run=ran)
    assert ctx.program_files() == ["pkg/__init__.py", "pkg/train.py"]  # only the repository's known files
    ctx = FixContext(source=tmp_path, known_files=known, entry_file="train.py", files_run=ran)
    assert ctx.program_files() == ["train.py", "pkg/__init__.py", "pkg/train.py"]
    # a notebook runner: the program is in the notebook (its cells get the fix), not in what it imports
    ctx = FixContext(source=tmp_path, known_files=known, entry_file="train.py", files_run=ran, notebooks=["a.ipynb"])
    assert ctx.program_files() == ["train.py"]


def _index(tmp_path: Path, meta: object) -> Path:
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "index.json").write_text(json.dumps({"format": "ferry-probe/1", "meta": meta, "events": []}))
    return tmp_path


def test_a_dumps_file_list_is_read_only_when_it_is_what_the_probe_writes(tmp_path):
    assert files_run(_index(tmp_path / "a", {"files_run": ["pkg/train.py"]})) == ["pkg/train.py"]
    assert files_run(_index(tmp_path / "b", {"files_run": "pkg/train.py"})) == []  # not a list: ignored
    assert files_run(_index(tmp_path / "c", {"files_run": [1] * 10})) == []
    assert files_run(_index(tmp_path / "d", {"files_run": ["x"] * 300})) == []  # more than the probe writes
    assert files_run(tmp_path / "missing") == []
