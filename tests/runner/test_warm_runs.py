"""Warm runs through the runner (``tools.runner.warm``): a run forked from the prewarmed
interpreter computes, records and reports what the cold run of the same request does."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from sandbox import detect
from tests.runner.test_run_api import TRAIN_LOOP
from tools.runner import warm
from tools.runner.api import run
from tools.runner.env import child_env
from tools.runner.models import RunRequest

pytestmark = pytest.mark.skipif("bwrap" not in detect().available, reason="warm runs need bubblewrap")

PLACEMENT = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "placement_mlp"


@pytest.fixture(scope="module")
def prewarmed():
    assert warm.prewarm(seed=0)
    yield
    warm.shutdown()


def _both(monkeypatch, tmp_path: Path, **req):
    """The same request run warm, then cold (``FERRY_WARM_RUNS=0``), each with its own artifacts."""
    monkeypatch.delenv(warm.WARM_ENV, raising=False)
    hot = run(RunRequest(artifacts_dir=tmp_path / "warm", timeout_s=120, **req))
    monkeypatch.setenv(warm.WARM_ENV, "0")
    cold = run(RunRequest(artifacts_dir=tmp_path / "cold", timeout_s=120, **req))
    monkeypatch.delenv(warm.WARM_ENV)
    return hot, cold


def _sites(log: Path) -> list[dict]:
    """The redirect log's events without the pid (the warm command's differs)."""
    return [{k: v for k, v in json.loads(line).items() if k != "pid"} for line in log.read_text().splitlines()]


def test_placement_sample_warm_matches_cold(prewarmed, monkeypatch, tmp_path: Path):
    hot, cold = _both(monkeypatch, tmp_path, path=PLACEMENT, command="python train.py --steps 6", device="cpu",
                      redirect_cuda="cpu", probe=True)
    assert hot.status == cold.status == "ok", (hot.stderr_tail, cold.stderr_tail)
    assert hot.warm_start is True and cold.warm_start is False
    losses = [line for line in hot.stdout_tail.splitlines() if line.startswith("step ")]
    assert len(losses) == 6
    assert hot.stdout_tail == cold.stdout_tail
    assert hot.redirect_log_path is not None and cold.redirect_log_path is not None
    assert _sites(hot.redirect_log_path) == _sites(cold.redirect_log_path) != []
    assert hot.probe_dir is not None and cold.probe_dir is not None
    files = sorted(p.name for p in hot.probe_dir.iterdir())
    assert "index.json" in files and any(f.endswith(".pt") for f in files)
    assert files == sorted(p.name for p in cold.probe_dir.iterdir())
    a = json.loads((hot.probe_dir / "index.json").read_text())
    b = json.loads((cold.probe_dir / "index.json").read_text())
    for key in ("events", "scalars", "module_ops", "module_classes"):
        assert a[key] == b[key], key
    assert a["scalars"]["loss"] and a["meta"]["steps_seen"] == b["meta"]["steps_seen"]


TPX_PROGRAM = """\
import torch
x = torch.ones(2, device="tpx") * 3
print("tpx", x.device.type, x.cpu().tolist())
print("rand", torch.rand(3).tolist())
print("devices", torch.tpx.device_count())
"""


def test_tpx_run_warm_matches_cold(prewarmed, monkeypatch, tmp_path: Path):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "tpx_prog.py").write_text(TPX_PROGRAM)
    hot, cold = _both(monkeypatch, tmp_path, path=repo, command="python tpx_prog.py", device="tpx")
    assert hot.status == cold.status == "ok", (hot.stderr_tail, cold.stderr_tail)
    assert hot.warm_start is True and cold.warm_start is False
    assert "tpx tpx [3.0, 3.0]" in hot.stdout_tail
    assert "devices 1" in hot.stdout_tail  # a one-process run's device count, set per run after the fork
    assert hot.stdout_tail == cold.stdout_tail


def test_pytest_junit_warm_matches_cold(prewarmed, monkeypatch, tmp_path: Path):
    repo = tmp_path / "repo"
    (repo / "tests").mkdir(parents=True)
    (repo / "tests" / "test_small.py").write_text(
        "def test_passes():\n    assert 1 + 1 == 2\n\n"
        "def test_fails():\n    assert [1, 2] == [1, 3]\n"
    )
    hot, cold = _both(monkeypatch, tmp_path, path=repo, command="python -m pytest -q tests", device="cpu")
    assert hot.status == cold.status == "failed"
    assert hot.exit_code == cold.exit_code == 1
    assert hot.warm_start is True and cold.warm_start is False
    assert hot.junit_xml is not None and cold.junit_xml is not None
    assert hot.trace is not None and cold.trace is not None
    outcome = lambda r: sorted((t.nodeid, t.outcome, t.message) for t in r.trace.tests)  # noqa: E731
    assert outcome(hot) == outcome(cold)
    assert {o for _, o, _ in outcome(hot)} == {"passed", "failed"}


def test_shell_commands_and_other_seeds_run_cold(prewarmed, monkeypatch, tmp_path: Path):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "hi.py").write_text("print('hi')\n")
    monkeypatch.delenv(warm.WARM_ENV, raising=False)
    piped = run(RunRequest(path=repo, command="python hi.py | tr a-z A-Z", device="cpu",
                           artifacts_dir=tmp_path / "a", timeout_s=60))
    assert piped.status == "ok" and piped.stdout_tail == "HI\n" and piped.warm_start is False

    def env(seed: int) -> dict[str, str]:
        return child_env(workspace=repo, device="cpu", redirect_cuda=None, seed=seed, redirect_log=None,
                         probe_dir=None, profile_dir=None, junit_xml=None, caller_env={})

    assert warm.warm_start_for("python hi.py", env(0)) is not None
    assert warm.warm_start_for("python hi.py", env(5)) is None  # no interpreter was prewarmed for seed 5
    monkeypatch.setenv(warm.WARM_ENV, "0")
    assert warm.warm_start_for("python hi.py", env(0)) is None


def test_prewarm_is_off_when_disabled(monkeypatch):
    monkeypatch.setenv(warm.WARM_ENV, "off")
    assert warm.prewarm(seed=11) is False




def test_an_evidence_run_the_probe_ends_starts_warm(prewarmed, monkeypatch, tmp_path: Path):
    """FERRY_PROBE_END (the evidence run, agent.migration.nodes.evidence) is read by the probe after the fork, as
    FERRY_PROBE_DIR is: the run forks from the same warm interpreter as the migration's other runs and ends as the
    cold run does."""
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "train.py").write_text(TRAIN_LOOP)
    hot, cold = _both(monkeypatch, tmp_path, path=repo, command="python train.py", device="cpu", probe=True,
                      env={"FERRY_PROBE_END": "1"})
    assert hot.status == cold.status == "ended", (hot.stderr_tail, cold.stderr_tail)
    assert hot.warm_start is True and cold.warm_start is False
    assert hot.ended_after_steps == cold.ended_after_steps == 2
    # the next run of the same interpreter, not asked to end, runs to its end
    monkeypatch.delenv(warm.WARM_ENV, raising=False)
    full = run(RunRequest(artifacts_dir=tmp_path / "full", timeout_s=120, path=repo, command="python train.py",
                          device="cpu", probe=True))
    assert full.ok and full.warm_start is True and full.ended_after_steps is None, full.stderr_tail
    assert "step 199" in full.stdout_tail


def test_a_full_pool_never_closes_a_server_serving_a_run(prewarmed, monkeypatch, tmp_path: Path):
    """Keep this test last: it replaces the module's seed-0 interpreter."""
    monkeypatch.setattr(warm, "MAX_SERVERS", 1)
    monkeypatch.delenv(warm.WARM_ENV, raising=False)
    # only the seed-0 interpreter in the pool (earlier tests on this worker may have left others)
    warm.shutdown()
    assert warm.prewarm(seed=0)
    (server,) = warm._servers.values()
    repo = tmp_path / "repo"
    repo.mkdir()
    # the run waits for a file in its artifacts dir (writable for it), created once the pool was asked
    (repo / "gated.py").write_text("import os, sys, time\nwhile not os.path.exists(sys.argv[1]):\n"
                                   "    time.sleep(0.02)\nprint('done')\n")
    gate = tmp_path / "a" / "child" / "go"
    box: dict = {}
    runner = threading.Thread(target=lambda: box.setdefault("res", run(RunRequest(
        path=repo, command=f"python gated.py {gate}", device="cpu", artifacts_dir=tmp_path / "a", timeout_s=60))))
    runner.start()
    while not server.busy() and runner.is_alive():
        time.sleep(0.02)
    assert warm.prewarm(seed=1) is False  # the only slot is serving a run: nothing is closed
    gate.write_text("")
    runner.join()
    res = box["res"]
    assert res.warm_start and res.status == "ok" and res.stdout_tail == "done\n", res.stderr_tail
    for _ in range(500):  # its waiter reported the exit and is ending
        if not server.busy():
            break
        time.sleep(0.02)
    assert warm.prewarm(seed=1) is True  # now idle: replaced
    assert not server.alive()

