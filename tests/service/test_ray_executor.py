"""``ferry serve --executor ray``: sessions run as Ray tasks on a real local cluster (one per module, two
CPUs: Ray takes seconds to start), driven through the HTTP API on loopback like any other session."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pg_fixtures import pg_url, postgres_server  # noqa: F401 - fixtures
from service_client import PLAIN, PROG, Server, create, read_events, wait_state, write_repo

ray = pytest.importorskip("ray")

TASK_TITLE = b"ray::run_attempt"


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """A local Ray cluster with two CPUs; its GCS address (the servers connect to it as a remote one)."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()


def _shape(client: Any, sid: str) -> dict[str, Any]:
    """What a finished session shows, without what differs from run to run (ids, times, durations)."""
    result = client.get(f"/v1/sessions/{sid}/result").json()
    events = read_events(client, sid)
    return {"kinds": [e["event"] for e in events],
            "steps": [e["data"]["node"] for e in events if e["event"] == "step"],
            "status": result["status"], "result_keys": sorted(result), "record_keys": sorted(result["result"]),
            "patch": client.get(f"/v1/sessions/{sid}/patch").text,
            "parity": [(r.get("name"), r.get("verdict")) for r in result["parity_rows"]]}


def _tasks() -> list[int]:
    """The processes running the service's Ray task now (a Ray worker's title is its task's name)."""
    out = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                cmdline = Path(entry.path, "cmdline").read_bytes()
            except OSError:
                continue
            if cmdline.startswith(TASK_TITLE):
                out.append(int(entry.name))
    return out


def _wait_for(check: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while not (got := check()):
        assert time.monotonic() < deadline, what
        time.sleep(0.2)
    return got


def test_sessions_run_as_ray_tasks_with_the_thread_executors_results(serve: Any, tmp_path: Path,
                                                                       cluster: str) -> None:
    roots = tmp_path / "roots"
    plain, asking = write_repo(roots, "plain", PLAIN), write_repo(roots, "prog", PROG)
    on_ray = serve("--allow-root", str(roots), "--workers", "2", "--executor", "ray", "--ray-address", cluster)
    here: Server = serve("--allow-root", str(roots), "--workers", "1", data_dir=tmp_path / "threads")
    c = on_ray.client
    sid = create(c, plain).json()["id"]
    waits = create(c, asking, approve=True).json()["id"]  # its answer resumes it from the carried checkpoint
    ref = create(here.client, plain).json()["id"]
    view = wait_state(c, waits, {"waiting_for_approval", "failed", "finished"})
    assert view["state"] == "waiting_for_approval", view
    assert view["interrupts"][0]["rule"] == "float64_to_float32"
    assert c.post(f"/v1/sessions/{waits}/approval", json={"action": "approve"}).status_code == 202
    for s in (sid, waits):
        view = wait_state(c, s, {"finished", "failed"})
        assert (view["state"], view["status"]) == ("finished", "migrated"), view
    wait_state(here.client, ref, {"finished", "failed"})

    assert _shape(c, sid) == _shape(here.client, ref)
    # the migrations ran on the cluster's workers: no workspace of theirs on the service's host, while the
    # outputs and run artifacts came back to its data dir
    assert not (on_ray.data_dir / "workspaces" / sid).exists() and (here.data_dir / "workspaces" / ref).exists()
    assert sorted(p.name for p in (on_ray.data_dir / "sessions" / sid / "out-1").iterdir()) == \
        sorted(p.name for p in (here.data_dir / "sessions" / ref / "out-1").iterdir())
    assert (on_ray.data_dir / "artifacts" / sid / "reference").is_dir()
    asked = read_events(c, waits)
    assert [e["event"] for e in asked].count("approval_request") == 1
    assert "float32" in c.get(f"/v1/sessions/{waits}/patch").text
    for e in read_events(c, sid) + asked:  # no path of a worker's private directory reaches a client
        assert "ferry-ray-" not in str(e["data"]), e


def test_two_servers_on_one_postgres_queue_run_their_migrations_on_one_ray_cluster(
        serve: Any, tmp_path: Path, cluster: str, pg_url: str) -> None:  # noqa: F811
    """The issue's shape: two API hosts share the Postgres queue and hand every migration to the cluster."""
    roots = tmp_path / "roots"
    repo = write_repo(roots, "plain", PLAIN)
    flags = ("--allow-root", str(roots), "--workers", "1", "--database", pg_url, "--lease", "5",
             "--executor", "ray", "--ray-address", cluster)
    one, two = serve(*flags), serve(*flags)
    assert one.data_dir == two.data_dir  # one shared data dir, as on a shared filesystem
    ids = [create(c, repo).json()["id"] for c in (one.client, two.client) for _ in range(2)]
    hosts = []
    for sid in ids:
        view = wait_state(two.client, sid, {"finished", "failed"})
        assert (view["state"], view["status"]) == ("finished", "migrated"), view
        events = read_events(one.client, sid)
        starts = [e["data"] for e in events if e["event"] == "started"]
        assert len(starts) == 1, starts  # claimed once, by one server
        steps = [e["data"]["node"] for e in events if e["event"] == "step"]
        # no step run twice: the steps streamed are the migration's recorded steps, each once (a node can
        # come round again, e.g. target_run after an evidence run: docs/parity.md)
        record = one.client.get(f"/v1/sessions/{sid}/result").json()["result"]
        assert steps == [s["node"] for s in record["steps"]] + ["report"], steps
        hosts.append(starts[0]["host"])
        # run on the cluster's workers: no workspace on the hosts' data dir, the artifacts came back to it
        assert not (one.data_dir / "workspaces" / sid).exists()
        assert (one.data_dir / "artifacts" / sid / "reference").is_dir()
    assert len(set(hosts)) == 2, hosts  # both API hosts took sessions


def test_cancel_reaches_the_task_and_a_task_that_dies_fails_its_session(serve: Any, tmp_path: Path,
                                                                        cluster: str) -> None:
    roots = tmp_path / "roots"
    slow = write_repo(roots, "slow", "import time\ntime.sleep(120)\n" + PLAIN)
    srv = serve("--allow-root", str(roots), "--workers", "2", "--executor", "ray", "--ray-address", cluster)
    c = srv.client
    doomed, dying = (create(c, slow).json()["id"] for _ in range(2))
    pids = _wait_for(lambda: len(_tasks()) == 2 and _tasks(), 120, "two Ray tasks never ran")
    for sid in (doomed, dying):
        read_events(c, sid, until=lambda e: e["event"] == "step")

    assert c.delete(f"/v1/sessions/{doomed}").status_code in (200, 202)
    view = wait_state(c, doomed, {"cancelled", "failed", "finished"}, timeout=60)
    assert view["state"] == "cancelled", view
    left = _wait_for(lambda: len(_tasks()) == 1 and _tasks(), 30, "the cancelled session's Ray task still runs")
    assert set(left) < set(pids)
    _wait_for(lambda: not list(Path(tempfile.gettempdir()).glob(f"ferry-ray-*/data/sessions/{doomed}")), 30,
              "the cancelled task's private directory is still there")

    os.kill(left[0], signal.SIGKILL)  # the worker running the other one dies
    view = wait_state(c, dying, {"failed", "finished", "cancelled"}, timeout=60)
    assert (view["state"], view["status"]) == ("failed", "failed_worker_lost"), view
    assert view["error"].startswith("the Ray task running the migration died ("), view["error"]
    kinds = [e["event"] for e in read_events(c, dying)]
    assert kinds[-2:] == ["error", "state"]


def test_an_address_nothing_answers_at_stops_the_server_at_start(tmp_path: Path) -> None:
    got = subprocess.run([sys.executable, "-m", "agent.cli", "serve", "--port", "0", "--data-dir",
                          str(tmp_path / "data"), "--executor", "ray", "--ray-address", "127.0.0.1:1"],
                         capture_output=True, text=True, timeout=60)
    assert got.returncode == 2, got
    assert "cannot reach the Ray cluster at 127.0.0.1:1" in got.stderr and "--ray-address local" in got.stderr
