"""A repository path that is ``/`` or inside ``/proc``, ``/sys``, ``/dev``, ``/run`` (named directly or
through a link) is refused by every command with exit 2 and a message, before anything walks it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.service.settings import SettingsError, resolve_roots
from tools.repopath import repo_path_problem

ROOT = Path(__file__).resolve().parents[2]


def _ferry(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agent.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env={**os.environ, "FERRY_LLM": "offline"})


@pytest.fixture
def proc_link(tmp_path: Path) -> str:
    link = tmp_path / "innocent"
    link.symlink_to("/proc/self")
    return str(link)


@pytest.mark.parametrize("which", ["/proc", "/sys", "/dev", "/", "link"])
def test_migrate_refuses_pseudo_filesystems(which: str, proc_link: str, tmp_path: Path):
    path = proc_link if which == "link" else which
    r = _ferry("migrate", path, "--run", "python x.py", "--state-dir", str(tmp_path / "state"),
               "--out", str(tmp_path / "out"))
    assert r.returncode == 2, (r.returncode, r.stderr[-500:])
    assert ("pseudo filesystem" in r.stderr or "filesystem root" in r.stderr) and "Traceback" not in r.stderr
    assert not (tmp_path / "state").exists() or not any((tmp_path / "state").rglob("*.py"))


def test_scan_run_check_and_pr_refuse_proc(proc_link: str, tmp_path: Path):
    pr = ["pr", "/proc", "--run", "python x.py", "--out", str(tmp_path / "pr-out")]
    for args in (["scan", "/proc"], ["scan", proc_link], ["rewrite", "/sys"],
                 ["run", "/proc", "--", "true"], ["check", "/dev", "--run", "python x.py"], pr):
        r = _ferry(*args)
        assert r.returncode == 2, (args, r.returncode, r.stderr[-500:])
        assert "pseudo filesystem" in r.stderr and "Traceback" not in r.stderr, (args, r.stderr[-500:])


def test_the_validator_and_the_services_roots(tmp_path: Path, proc_link: str):
    assert repo_path_problem(tmp_path) is None
    assert "resolves to /proc/" in (repo_path_problem(proc_link) or "")
    with pytest.raises(SettingsError, match="pseudo filesystem"):
        resolve_roots(["/proc"])
