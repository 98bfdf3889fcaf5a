"""Side-by-side runs (the run scheduler, agent.migration.runs) with the real runner and sandbox."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.migration import adapters
from agent.migration import runs as runs_mod
from agent.migration.facade import load
from agent.migration.runs import RunScheduler, finished
from tools.runner.models import RunResult

ROOT = Path(__file__).resolve().parents[2]


def _run(repo: Path, cmd: str, adir: Path, cancel=None) -> RunResult:
    return adapters.run(repo, cmd, device="cpu", redirect_cuda=None, probe=False, profile=False, timeout_s=120,
                       seed=0, artifacts_dir=adir, cancel=cancel)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    src = tmp_path / "repo"
    src.mkdir()
    (src / "slow.py").write_text("import time\nprint('started', flush=True)\ntime.sleep(60)\nprint('finished')\n")
    (src / "quick.py").write_text("print('quick', 6 * 7)\n")
    return src


@pytest.fixture
def runs():
    scheduler = RunScheduler()
    yield scheduler
    scheduler.close()


def test_cancel_stops_a_sandboxed_run_and_it_never_counts_as_finished(repo: Path, tmp_path: Path, runs: RunScheduler):
    adir = tmp_path / "art-slow"
    key = "t1:slow"
    assert runs.start(key, lambda cancel: _run(repo, "python slow.py", adir, cancel))
    assert not runs.start(key, lambda cancel: _run(repo, "python slow.py", adir, cancel))  # one per key
    assert runs.running("t1:") == [key]
    job = runs._jobs[key]
    assert runs.cancel(key)
    result = job.future.result(timeout=60)
    assert result.status == "cancelled"
    assert "finished" not in result.stdout_tail
    assert result.duration_s < 60  # stopped, not waited out
    assert runs.running("t1:") == []
    assert finished(adir) is None  # a cancelled run is not a result
    assert runs.join(key, adir) is None


def test_a_run_being_joined_can_still_be_cancelled(repo: Path, tmp_path: Path, runs: RunScheduler):
    """A node waiting for a background run (await_reference) must not outlast a cancel of its migration."""
    import threading
    import time

    adir = tmp_path / "art-joined"
    key = "t5:slow"
    runs.start(key, lambda cancel: _run(repo, "python slow.py", adir, cancel))
    joined: list[RunResult | None] = []
    waiter = threading.Thread(target=lambda: joined.append(runs.join(key, adir)))
    waiter.start()
    deadline = time.monotonic() + 30
    while not (adir / "child").exists() and time.monotonic() < deadline:  # (its sandbox is up)
        time.sleep(0.1)
    time.sleep(0.5)
    started = time.monotonic()
    assert runs.cancel_prefix("t5:") == [key]  # the join did not hide it
    waiter.join(timeout=60)
    assert not waiter.is_alive() and joined == [None] and time.monotonic() - started < 30
    assert not runs.has(key)


def test_a_finished_run_is_joined_and_found_again_on_disk(repo: Path, tmp_path: Path, runs: RunScheduler):
    adir = tmp_path / "art-quick"
    key = "t2:quick"
    runs.start(key, lambda cancel: _run(repo, "python quick.py", adir, cancel))
    result = runs.join(key, adir)
    assert result is not None and result.status == "ok" and "quick 42" in result.stdout_tail
    assert not runs.has(key)
    # another process (a resume: another scheduler) has no job under that key, but the result is on disk
    again = RunScheduler().join(key, adir)
    assert again is not None and again.stdout_tail == result.stdout_tail
    assert runs.join("t2:never-started", tmp_path / "nothing") is None


def test_two_schedulers_keep_their_runs_apart(repo: Path, tmp_path: Path, runs: RunScheduler):
    other = RunScheduler()
    adir = tmp_path / "art-own"
    assert runs.start("t3:x", lambda cancel: _run(repo, "python quick.py", adir, cancel))
    assert not other.has("t3:x") and other.running() == []
    assert not other.cancel("t3:x")  # nothing of another scheduler's to cancel
    assert runs.join("t3:x", adir) is not None
    other.close()


def test_parallel_limit_follows_the_environment(monkeypatch, runs: RunScheduler):
    monkeypatch.setenv(runs_mod.PARALLEL_ENV, "1")
    assert runs_mod.parallel_limit() == 1
    monkeypatch.setenv(runs_mod.PARALLEL_ENV, "5")
    assert runs.spare_cores() == 5 - len(runs.running())
    monkeypatch.setenv(runs_mod.PARALLEL_ENV, "lots")
    assert runs_mod.parallel_limit() >= 1  # falls back to the core count, with a warning


def _migrate_with_tests(tmp_path: Path, program: str, tests: str, parallel: str,
                        mid: str) -> tuple[Path, Path, dict, str]:
    """``ferry migrate`` of a repo holding ``prog.py`` and ``tests/test_a.py``, with
    FERRY_PARALLEL_RUNS=``parallel``; returns (repo, state dir, the JSON result, stderr)."""
    repo = tmp_path / "repo"
    (repo / "tests").mkdir(parents=True)
    (repo / "prog.py").write_text(program)
    (repo / "tests" / "test_a.py").write_text(tests)
    sdir = tmp_path / "state"
    env = {**os.environ, runs_mod.PARALLEL_ENV: parallel}
    res = subprocess.run([sys.executable, "-m", "agent.cli", "migrate", str(repo), "--run", "python prog.py",
                          "--test", "python -m pytest -q tests", "--json", "--state-dir", str(sdir), "--id", mid],
                         cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    return repo, sdir, json.loads(res.stdout), res.stderr


BROKEN = "import torch\nx = torch.ones(3).cuda()\nraise RuntimeError('the original program is broken')\n"
TESTS = "def test_ok():\n    assert True\n"


@pytest.mark.parametrize("parallel", ["1", "4"])
def test_a_broken_original_ends_the_migration_side_by_side_or_not(tmp_path: Path, parallel: str):
    """The reference run goes on beside the rewrite and target run (or not, FERRY_PARALLEL_RUNS=1);
    either way a failing original ends the migration with needs_human, naming the cause."""
    repo, sdir, out, stderr = _migrate_with_tests(tmp_path, BROKEN, TESTS, parallel, "broken")
    assert out["status"] == "needs_human", stderr[-2000:]
    assert "does not run with CUDA redirected to CPU" in out["summary"]
    assert "the original program is broken" in out["summary"]
    state = load("broken", sdir)
    kinds = [r.kind for r in state.runs]
    assert kinds.count("reference") == 1 and "tests" not in kinds
    nodes = [s.node for s in state.steps]
    if parallel == "1":
        assert "scan" not in nodes  # found before anything else ran
    else:
        assert nodes.index("target_run") > nodes.index("rewrite")  # the target run went on meanwhile
    assert (repo / "prog.py").read_text() == BROKEN


_progs_spec = importlib.util.spec_from_file_location("agent_test_programs_bg", Path(__file__).with_name("programs.py"))
programs = importlib.util.module_from_spec(_progs_spec)
_progs_spec.loader.exec_module(programs)


@pytest.mark.slow
@pytest.mark.parametrize("parallel", ["1", "4"])
def test_tests_go_beside_the_target_run_and_stale_ones_are_dropped(tmp_path: Path, parallel: str):
    """With cores to spare the tests start beside each target run; the ones started beside the
    failing first run (float64 on tpx) are dropped (cancelled, or finished and ignored: they ran old
    code) and never counted, and the migration ends the same way as with everything in order."""
    tests = "import torch\n\n\ndef test_on_the_device():\n    assert torch.ones(2, device='tpx').sum().item() == 2\n"
    _, sdir, out, stderr = _migrate_with_tests(tmp_path, programs.POLICY_PROGRAM, tests, parallel, "side")
    assert out["status"] == "migrated", (out["summary"], stderr[-2000:])
    state = load("side", sdir)
    kinds = [r.kind for r in state.runs]
    assert kinds.count("tests") == 1 and kinds.count("target") == 2 and kinds.count("reference") == 1
    # the test guard's tests on the original (CPU) would fail (this test names tpx itself), but every test
    # passes on tpx and none is lost: the original's tests are only collected (docs/guard.md)
    assert "reference_tests" not in kinds and [r.status for r in state.runs if r.kind == "reference_collect"] == ["ok"]
    # the first target run may be the evidence run (docs/parity.md): it failed as the plain target would
    assert kinds.count("evidence") <= 1
    assert all(r.status == "ok" for r in state.runs if r.kind not in ("target", "evidence"))
    # the tests are the last run of the fix loop; the CPU guard's runs come after them
    assert [r.kind for r in state.runs if not r.kind.startswith("cpu_")][-1] == "tests"
    assert kinds.index("cpu_check") > len(kinds) - 1 - kinds[::-1].index("tests")
    tests_step = [s for s in state.steps if s.node == "tests"][-1].summary
    assert ("beside the target run" in tests_step) == (parallel == "4")
    if parallel == "4":  # the counted tests ran on the fixed code (iteration 1), beside its target run
        # named for its round and its code's digest (agent.migration.workspace.round_label)
        # (the tests started for the FIX008 round when the evidence run failed ran other code: never counted)
        art = sdir / "artifacts" / "side"
        [checked] = [p.name.rsplit("-", 1)[1] for p in art.glob("cpu-check-1-*")]
        [tests_1] = art.glob(f"tests-1-{checked}/result.json")
        assert json.loads(tests_1.read_text())["status"] == "ok"
