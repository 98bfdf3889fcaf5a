"""``--env`` on ferry run / check / migrate goes through the one rule of the user's variables
(``sandbox.userenv``): a loader or interpreter variable is exit 2 naming it and why, before anything
runs, so a planted library's constructor never runs (issue 34, item 1)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("planted_library", ROOT / "tests" / "sandbox" / "planted_library.py")
assert _spec is not None and _spec.loader is not None
planted = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(planted)

pytestmark = planted.requires_gcc


def _ferry(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    return subprocess.run([sys.executable, "-m", "agent.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env=env)


@pytest.mark.parametrize(("command", "variable", "why"), [
    ("run", "LD_PRELOAD", "dynamic loader"), ("check", "LD_PRELOAD", "dynamic loader"),
    ("migrate", "LD_PRELOAD", "dynamic loader"), ("run", "PYTHONSTARTUP", "Python interpreter"),
    ("run", "BASH_ENV", "shell"),
])
def test_a_loader_or_interpreter_variable_is_exit_2_naming_it(command: str, variable: str, why: str,
                                                              tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "train.py").write_text("print('ran')\n")
    markers = tmp_path / "markers"
    lib = planted.build_hook(repo, markers)
    tail = {"migrate": ["--run", "python train.py", "--state-dir", str(tmp_path / "s")],
            "check": ["--run", "python train.py"], "run": []}[command]
    cmd = ["--", "python", "train.py"] if command == "run" else []
    r = _ferry(command, str(repo), *tail, "--env", f"{variable}={lib}", *cmd)
    assert r.returncode == 2, (r.stdout[-2000:], r.stderr[-2000:])
    assert f"--env {variable}" in r.stderr and why in r.stderr and "Traceback" not in r.stderr
    assert "ran" not in r.stdout
    assert planted.markers_seen(markers) == []  # nothing loaded it, on the host or in a sandbox
