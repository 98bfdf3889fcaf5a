"""ferry pr: a migrated branch with one commit and the PR text; the user's checkout is untouched."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PROG = '''import torch

device = torch.device("cuda")
x = torch.arange(4, dtype=torch.float32).cuda()
for step in range(2):
    print(f"step {step} loss {(x * (step + 1)).sum().item():.4f}")
'''


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout.strip()


@pytest.mark.slow
def test_pr_creates_branch_commit_and_text(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "prog.py").write_text(PROG)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "prog.py")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "init")
    res = subprocess.run([sys.executable, "-m", "agent.cli", "pr", str(repo), "--run", "python prog.py", "--json",
                          "--state-dir", str(tmp_path / "state"), "--out", str(tmp_path / "out")],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    out = json.loads(res.stdout)
    branch = out["branch"]
    assert out["status"] == "migrated" and branch.startswith("ferry/migrate-") and out["base"] == "main"
    assert _git(repo, "rev-parse", "--abbrev-ref", "HEAD") == "main"  # checkout untouched
    assert (repo / "prog.py").read_text() == PROG
    assert _git(repo, "status", "--porcelain") == ""
    assert _git(repo, "rev-list", "--count", f"main..{branch}") == "1"
    migrated = _git(repo, "show", f"{branch}:prog.py")
    assert ".cuda()" not in migrated and "torch.device(\"cuda\")" not in migrated
    text = (tmp_path / "out" / "pr.md").read_text()
    assert branch in text and "migrated" in text
    assert _git(repo, "worktree", "list").count("\n") == 0  # the temporary worktree is gone


def test_pr_outside_git_is_a_usage_error(tmp_path):
    res = subprocess.run([sys.executable, "-m", "agent.cli", "pr", str(tmp_path), "--run", "python x.py"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "not inside a git repository" in res.stderr
