"""Issue 29: a migration's runs go side by side, so each computes on its share of the cores
(``sandbox.hostmem.side_by_side_threads``, given as OMP_NUM_THREADS), warm or cold; a lone run, the user's
own OMP_NUM_THREADS and Ferry's own environment's keep what they set."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.migration import adapters
from agent.migration.runs import RunScheduler
from sandbox import detect, hostmem
from tools.runner import warm
from tools.runner.api import run
from tools.runner.env import RUN_THREADS_ENV, child_env
from tools.runner.models import RunRequest

PROGRAM = 'import os, torch\nprint("threads", torch.get_num_threads(), os.environ.get("OMP_NUM_THREADS"))\n'


def _env(**kw) -> dict[str, str]:
    base = dict(workspace=Path("/w"), device="cpu", redirect_cuda=None, seed=0, redirect_log=None, probe_dir=None,
                profile_dir=None, junit_xml=None)
    return child_env(**{**base, **kw})


def test_the_setting_becomes_omp_num_threads_unless_the_user_or_ferrys_environment_sets_it(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    env = _env(caller_env={RUN_THREADS_ENV: "3"})
    assert env["OMP_NUM_THREADS"] == "3" and RUN_THREADS_ENV not in env
    assert "OMP_NUM_THREADS" not in _env(caller_env={})  # a lone run: torch's default
    assert _env(caller_env={RUN_THREADS_ENV: "3"}, user_env={"OMP_NUM_THREADS": "5"})["OMP_NUM_THREADS"] == "5"
    assert "OMP_NUM_THREADS" not in _env(caller_env={RUN_THREADS_ENV: "x"})
    monkeypatch.setenv("OMP_NUM_THREADS", "7")  # passed on by the sandbox's scrubbed environment as it is
    assert "OMP_NUM_THREADS" not in _env(caller_env={RUN_THREADS_ENV: "3"})


def test_the_share_follows_the_runs_that_may_go_at_once(monkeypatch):
    monkeypatch.setattr(hostmem, "usable_cores", lambda: 8)
    monkeypatch.delenv(hostmem.PARALLEL_ENV, raising=False)
    assert hostmem.side_by_side_threads() == 8 // hostmem.SIDE_BY_SIDE
    monkeypatch.setenv(hostmem.PARALLEL_ENV, "1")
    assert hostmem.side_by_side_threads() == 8
    monkeypatch.setattr(hostmem, "usable_cores", lambda: 2)
    monkeypatch.setenv(hostmem.PARALLEL_ENV, "2")
    assert hostmem.side_by_side_threads() == 1


@pytest.mark.skipif("bwrap" not in detect().available, reason="warm runs need bubblewrap")
def test_a_migrations_runs_compute_on_their_share_warm_and_a_lone_run_on_every_core(monkeypatch, tmp_path: Path):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv(warm.WARM_ENV, raising=False)
    monkeypatch.setattr(hostmem, "usable_cores", lambda: 2)
    monkeypatch.setenv(hostmem.PARALLEL_ENV, "2")  # two cores, two runs at once: one thread each
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "p.py").write_text(PROGRAM)
    # its own warm interpreter: one an earlier test of this process left (a `ferry migrate` it ran starts one
    # first thing) was started in that test's environment and working directory
    warm.shutdown()
    runs = RunScheduler()
    try:
        assert runs.prewarm_runs(0, user_env={})
        side = adapters.run(repo, "python p.py", device="cpu", redirect_cuda=None, probe=False, profile=False,
                            timeout_s=120, seed=0, artifacts_dir=tmp_path / "side",
                            environment=adapters.RunEnvironment())
        lone = run(RunRequest(path=repo, command="python p.py", device="cpu", timeout_s=120,
                              artifacts_dir=tmp_path / "lone"))
    finally:
        runs.close()
        warm.shutdown()
    assert side.status == "ok", side.stderr_tail
    assert side.warm_start is True, side.warm_fallback  # the warm interpreter started with the same setting
    assert "threads 1 1" in side.stdout_tail
    assert lone.status == "ok" and lone.stdout_tail.strip().endswith(" None")  # torch's own default
