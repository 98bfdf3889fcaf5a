"""What a Ray worker sends back is hostile input: the bundle of outputs is unpacked like an upload, the
paths of the worker's directory are rewritten whole. No Ray here (agent.service.ray_executor's checks)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

from agent.migration.facade import export_checkpoint
from agent.service import bundle
from agent.service.ray_executor import RayExecutor, ResultRefused
from agent.service.ray_task import OWNER, rewriter, sweep
from agent.service.settings import ServiceSettings
from agent.service.store import SessionRow
from agent.service.uploads import SourceRefused, UploadLimits

LIMITS = UploadLimits()


def _row() -> SessionRow:
    return SessionRow(id="s1", owner="o", state="running", status=None, summary=None, step=None,
                      options=None, source=None, attempt=1, answer=None, cancel=False,  # type: ignore[arg-type]
                      error=None, created_at=0.0, updated_at=0.0)


def _tar(members: list[tarfile.TarInfo]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for m in members:
            tar.addfile(m, io.BytesIO(b"x" * m.size) if m.isreg() else None)
    return buf.getvalue()


def _file(name: str, size: int = 1) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    return info


def _link(name: str, to: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = tarfile.SYMTYPE, to
    return info


def test_a_bundle_carries_regular_files_only_and_comes_back_whole(tmp_path: Path) -> None:
    out = tmp_path / "src" / "out"
    (out / "sub").mkdir(parents=True)
    (out / "ferry.patch").write_text("diff")
    (out / "sub" / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(out / "sub" / "run.sh", 0o755)
    os.symlink("/etc/passwd", out / "leak")
    data = bundle.pack({"out": out, "artifacts": tmp_path / "missing"}, limit=1000)
    dest = tmp_path / "dest"
    dest.mkdir()
    got = bundle.unpack(data, dest, ["out", "artifacts"], LIMITS)
    assert set(got) == {"out"}
    assert sorted(p.relative_to(got["out"]).as_posix() for p in got["out"].rglob("*") if p.is_file()) == \
        ["ferry.patch", "sub/run.sh"]
    assert os.stat(got["out"] / "sub" / "run.sh").st_mode & 0o111
    with pytest.raises(bundle.BundleTooLarge):
        bundle.pack({"out": out}, limit=5)


@pytest.mark.parametrize("members", [
    [_file(bundle.MARKER, 0), _link("out/ferry.patch", "/etc/passwd")],
    [_file(bundle.MARKER, 0), _file("out/../../escaped")],
    [_file(bundle.MARKER, 0), _file("/abs/ferry.patch")],
    [_file(bundle.MARKER, 0), _file("elsewhere/ferry.patch")],
    [_file(bundle.MARKER, 0), _file("out/big", 2000)],
])
def test_a_hostile_bundle_is_refused_and_leaves_nothing(tmp_path: Path, members: list[tarfile.TarInfo]) -> None:
    dest = tmp_path / "dest"
    dest.mkdir()
    with pytest.raises(SourceRefused):
        bundle.unpack(_tar(members), dest, ["out", "artifacts"], UploadLimits(max_unpacked_bytes=1000))
    assert list(dest.iterdir()) == [] and not (tmp_path / "escaped").exists()


def _checkpoint(values: dict[str, Any]) -> str:
    return json.dumps({"format": 1, "migration_id": "s1", "metadata": {}, "writes": [],
                       "checkpoint": {"v": 4, "id": "1", "ts": "", "channel_values": {"migration_id": "s1", **values},
                                      "channel_versions": {}, "versions_seen": {}}})


def test_refused_outputs_fail_the_session_and_keep_its_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FERRY_DATABASE_URL", raising=False)
    settings = ServiceSettings(data_dir=tmp_path / "data", executor="ray")
    out = tmp_path / "data" / "sessions" / "s1" / "out-1"
    out.mkdir(parents=True)
    (out / "ferry.patch").write_text("kept")
    row = _row()
    hostile = _tar([_file(bundle.MARKER, 0), _link("out/ferry.patch", "/etc/passwd")])
    with pytest.raises(ResultRefused, match="outputs that are refused"):  # with a checkpoint that would do
        RayExecutor(settings)._take_result(row, {"bundle": hostile, "checkpoint": _checkpoint({})})
    assert export_checkpoint("s1", tmp_path / "data") is None
    assert (out / "ferry.patch").read_text() == "kept"
    assert sorted(p.name for p in (tmp_path / "data" / "sessions" / "s1").iterdir()) == ["out-1"]


def test_the_worker_paths_are_rewritten_whole() -> None:
    shown = rewriter([("/w/data", "/srv/data"), ("/w/data", "/srv/data")])
    assert shown("/w/data") == "/srv/data"
    assert shown("at /w/data/sessions/s1/repo/x.py:3 and '/w/data'") == \
        "at /srv/data/sessions/s1/repo/x.py:3 and '/srv/data'"
    assert shown("/w/data2/x /w/database") == "/w/data2/x /w/database"
    assert rewriter([("/same", "/same")])("/same/x") == "/same/x"


@pytest.mark.parametrize("values", [
    {"outputs": {"dir": "/etc", "patch": "/etc/passwd", "report": "/etc/r", "result": "/etc/x"}},
    {"files": {"../../outside.py": "x"}},
    {"outputs": {"dir": "{out}", "patch": "{out}/../../../../../../etc/passwd", "report": "{out}/report.md",
                 "result": "{out}/result.json"}},
    {"outputs": {"dir": "{out}", "patch": "{out}/../../s2/out-1/ferry.patch", "report": "{out}/report.md",
                 "result": "{out}/result.json"}},
    {"outputs": {"dir": "{out}", "patch": "ferry.patch", "report": "{out}/report.md", "result": "{out}/result.json"}},
])
def test_a_checkpoint_naming_files_outside_the_session_is_refused_with_its_outputs(
        tmp_path: Path, values: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FERRY_DATABASE_URL", raising=False)
    settings = ServiceSettings(data_dir=tmp_path / "data", executor="ray")
    (tmp_path / "data").mkdir()
    row = _row()
    out = str(tmp_path / "data" / "sessions" / "s1" / "out-1")
    text = _checkpoint(json.loads(json.dumps(values).replace("{out}", out)))
    sent = tmp_path / "sent"
    sent.mkdir()
    (sent / "ferry.patch").write_text("diff")
    with pytest.raises(ResultRefused, match="checkpoint that is refused"):
        RayExecutor(settings)._take_result(row, {"bundle": bundle.pack({"out": sent}, 1000), "checkpoint": text})
    assert export_checkpoint("s1", tmp_path / "data") is None  # nothing of the result kept
    assert sorted(p.name for p in (tmp_path / "data").rglob("*") if p.is_file()) == ["checkpoints.sqlite"]


def test_the_private_directories_of_dead_tasks_are_swept(tmp_path: Path) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    for name, pid in (("ferry-ray-dead", gone.pid), ("ferry-ray-live", os.getpid()), ("ferry-ray-new", None)):
        (tmp_path / name).mkdir()
        if pid is not None:
            (tmp_path / name / OWNER).write_text(str(pid))
    (tmp_path / "other").mkdir()
    sweep(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ferry-ray-live", "ferry-ray-new", "other"]


def test_a_result_that_comes_after_the_stop_signal_is_not_kept(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The task ended with its result just as the session was stopped (a lost lease, a DELETE): nothing of
    the result is written over what the session's new holder (or its cancel) left."""
    import threading

    from agent.service import ray_executor
    from agent.service.executor import SessionCancelled

    monkeypatch.delenv("FERRY_DATABASE_URL", raising=False)
    settings = ServiceSettings(data_dir=tmp_path / "data", executor="ray")
    out = tmp_path / "data" / "sessions" / "s1" / "out-1"
    out.mkdir(parents=True)
    (out / "ferry.patch").write_text("the new holder's")
    sent = tmp_path / "sent"
    sent.mkdir()
    (sent / "ferry.patch").write_text("late")
    stop = threading.Event()
    done = {"kind": "done", "bundle": bundle.pack({"out": sent}, 1000),
            "checkpoint": _checkpoint({}).replace('"id": "1"', '"id": "1f0c2b5e-0000-6000-8000-000000000001"')}

    class Remote:
        def remote(self, *args: Any) -> object:
            return object()

    def follow(self: Any, ray: Any, gen: Any, progress: Any, stop_: threading.Event) -> dict[str, Any]:
        stop_.set()  # the heartbeat's stop came while the last item was on its way
        return done

    monkeypatch.setattr(ray_executor, "_ray", lambda: None)
    monkeypatch.setattr(RayExecutor, "_follow", follow)
    executor = RayExecutor(settings)
    executor._remote = Remote()
    with pytest.raises(SessionCancelled):
        executor._run(_row(), {}, None, None, lambda node, update: None, stop)
    assert (out / "ferry.patch").read_text() == "the new holder's"
    assert export_checkpoint("s1", tmp_path / "data") is None


def test_the_lease_is_asked_for_before_a_result_is_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    from agent.service import ray_executor
    from agent.service.executor import BEFORE_RESULT
    from agent.service.store import LeaseLost

    monkeypatch.delenv("FERRY_DATABASE_URL", raising=False)
    settings = ServiceSettings(data_dir=tmp_path / "data", executor="ray")
    out = tmp_path / "data" / "sessions" / "s1" / "out-1"
    out.mkdir(parents=True)
    (out / "ferry.patch").write_text("the new holder's")
    sent = tmp_path / "sent"
    sent.mkdir()
    (sent / "ferry.patch").write_text("late")
    done = {"kind": "done", "bundle": bundle.pack({"out": sent}, 1000), "checkpoint": None}
    asked: list[str] = []

    def progress(node: str, update: Any) -> None:
        asked.append(node)
        if node == BEFORE_RESULT:
            raise LeaseLost("s1", 1)

    class Remote:
        def remote(self, *args: Any) -> object:
            return object()

    monkeypatch.setattr(ray_executor, "_ray", lambda: None)
    monkeypatch.setattr(RayExecutor, "_follow", lambda *args: done)
    executor = RayExecutor(settings)
    executor._remote = Remote()
    with pytest.raises(LeaseLost):
        executor._run(_row(), {}, None, None, progress, threading.Event())
    assert asked == [BEFORE_RESULT] and (out / "ferry.patch").read_text() == "the new holder's"
