"""Checkpoint + resume after a real kill -9 of `ferry migrate`, and --approve interrupts.

These drive the real CLI in subprocesses with the real runner, codemods and tpx backend.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from agent.migration.facade import load
from tools.patch import git_apply

ROOT = Path(__file__).resolve().parents[2]

# A CUDA program: the codemods fix the placement, the float64 metric needs the offline policy.
_progs_spec = importlib.util.spec_from_file_location("agent_test_programs", Path(__file__).with_name("programs.py"))
programs = importlib.util.module_from_spec(_progs_spec)
_progs_spec.loader.exec_module(programs)
PROG = programs.POLICY_PROGRAM


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "prog.py").write_text(PROG)
    return repo


def _ferry(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agent.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, **kw)


@pytest.mark.slow
def test_kill_9_then_resume_keeps_finished_steps_and_edits(tmp_path):
    repo = _repo(tmp_path)
    sdir = tmp_path / "state"
    mid = "kill-test"
    code = programs.migrate_then_kill_9(ROOT, repo, sdir, mid, tmp_path / "out", lambda: load(mid, sdir))
    assert code == -signal.SIGKILL
    killed = load(mid, sdir)
    assert killed.pending, "the killed migration must have work left"
    assert killed.status is None
    assert ".float()" in killed.files["prog.py"]  # the policy edit is in the checkpoint
    # lose the workspace too: it must be rebuilt from the original + the edits in the state
    assert killed.workspace is not None
    shutil.rmtree(killed.workspace)

    res = _ferry("resume", mid, "--state-dir", str(sdir), "--json")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    result = json.loads(res.stdout)
    assert result["status"] == "migrated"
    final = load(mid, sdir)
    steps = programs.steps(final)
    for node in ("ingest", "reference_run", "scan", "plan", "rewrite", "apply_fix"):
        assert steps.count(node) == 1, f"{node} ran {steps.count(node)} times: {steps}"
    assert (repo / "prog.py").read_text() == PROG  # the original is never written
    patch = (tmp_path / "out" / "ferry.patch").read_text()
    copy = tmp_path / "copy"
    shutil.copytree(repo, copy)
    git_apply(copy, patch)
    migrated = (copy / "prog.py").read_text()
    assert ".cuda()" not in migrated and '"cuda"' not in migrated and ".double()" not in migrated
    assert ".float().sum()" in migrated


@pytest.fixture(scope="module")
def uninterrupted_patch(tmp_path_factory) -> str:
    """The patch of the same migration run without interruption."""
    tmp = tmp_path_factory.mktemp("plain")
    res = _ferry("migrate", str(_repo(tmp)), "--run", "python prog.py", "--json", "--state-dir", str(tmp / "state"),
                 "--out", str(tmp / "out"))
    assert res.returncode == 0 and json.loads(res.stdout)["status"] == "migrated", res.stderr[-3000:]
    return (tmp / "out" / "ferry.patch").read_text()


@pytest.mark.slow
@pytest.mark.parametrize("node", ["ingest", "rewrite", "target_run", "await_reference", "diagnose"])
def test_kill_9_after_each_node_then_resume_gives_the_same_patch(tmp_path, node, uninterrupted_patch):
    """Killed with SIGKILL right after ``node`` was checkpointed (the next node mid-way), resumed:
    the migration ends as an uninterrupted one, with the same patch, and no node is redone."""
    repo = _repo(tmp_path)
    sdir = tmp_path / "state"
    mid = f"kill-{node}"
    code = programs.migrate_then_kill_9(ROOT, repo, sdir, mid, tmp_path / "out", lambda: load(mid, sdir),
                                        at_step=node)
    assert code == -signal.SIGKILL
    done_before = programs.steps(load(mid, sdir))
    res = _ferry("resume", mid, "--state-dir", str(sdir), "--json")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert json.loads(res.stdout)["status"] == "migrated"
    assert (tmp_path / "out" / "ferry.patch").read_text() == uninterrupted_patch
    steps = programs.steps(load(mid, sdir))
    assert steps[:len(done_before)] == done_before  # what was checkpointed is kept, not redone
    for once in ("ingest", "scan", "plan", "rewrite"):
        assert steps.count(once) == 1, steps


@pytest.mark.slow
def test_approve_interrupts_before_policy_edit_then_resumes(tmp_path):
    repo = _repo(tmp_path)
    sdir = tmp_path / "state"
    res = _ferry("migrate", str(repo), "--run", "python prog.py", "--approve", "--apply", "--json",
                 "--state-dir", str(sdir), "--id", "appr", "--out", str(tmp_path / "out"))
    assert res.returncode == 1, res.stderr[-3000:]
    waiting = json.loads(res.stdout)
    assert waiting["status"] == "awaiting_approval"
    question = waiting["interrupts"][0]
    assert question["rule"] == "float64_to_float32" and question["kind"] == "policy"
    assert "+        total = ((x + step) * w).float().sum()" in question["diff"]
    assert "float64" in question["reason"]
    before = load("appr", sdir)
    assert before.pending == ["apply_fix"] and before.iteration == 0
    assert (repo / "prog.py").read_text() == PROG  # --apply waits for success
    # the codemod edits were applied without asking
    assert any(e.kind == "codemod" for e in before.edits)

    # answering with an edit of our own: verified the same way
    mine = tmp_path / "mine.py"
    mine.write_text(before.files["prog.py"].replace(".double().sum()", ".sum()"))
    res2 = _ferry("resume", "appr", "--edit", f"prog.py={mine}", "--state-dir", str(sdir), "--json")
    assert res2.returncode == 0, res2.stdout[-3000:] + res2.stderr[-3000:]
    result = json.loads(res2.stdout)
    assert result["status"] == "migrated"
    assert [e["kind"] for e in result["edits"]][-1] == "human"
    after = load("appr", sdir)
    assert programs.steps(after).count("diagnose") == 1  # steps before the interrupt were not redone
    assert ".double()" not in after.files["prog.py"]
    assert result["applied"] is True  # --apply: the verified patch was applied to the original
    assert (repo / "prog.py").read_text() == after.files["prog.py"]


@pytest.mark.slow
def test_reject_ends_with_named_status(tmp_path):
    repo = _repo(tmp_path)
    sdir = tmp_path / "state"
    res = _ferry("migrate", str(repo), "--run", "python prog.py", "--approve", "--json", "--state-dir", str(sdir),
                 "--id", "rej")
    assert res.returncode == 1 and json.loads(res.stdout)["status"] == "awaiting_approval"
    res2 = _ferry("resume", "rej", "--reject", "--state-dir", str(sdir), "--json")
    assert res2.returncode == 1
    result = json.loads(res2.stdout)
    assert result["status"] == "rejected"
    assert "float64_to_float32" in result["summary"]
    assert not any(e["kind"] == "policy" for e in result["edits"])


def test_resume_of_unknown_id_is_a_usage_error(tmp_path):
    res = _ferry("resume", "nope", "--state-dir", str(tmp_path))
    assert res.returncode == 2
    assert "no migration 'nope'" in res.stderr
