"""Migrations as Ray tasks (``ferry serve --executor ray --ray-address ADDR|auto|local``; the ray extra).

Each start or resume of a session's attempt is one Ray task declaring one CPU (its sandboxed runs are
children of the task's process). The task gets the session's repository copy, its options (a start) or
its answer and latest checkpoint (a resume), runs the migration in a private directory of its worker
(:mod:`agent.service.ray_task`) and streams each node's update back as it comes (a Ray generator task);
the workers record them as events exactly as for a migration run in their own thread. At the end the
task sends the migration's latest checkpoint, saved here in the service's checkpoint store (SQLite, or
the shared Postgres one when ``FERRY_DATABASE_URL`` names it), and its outputs and run artifacts as one
bundle, unpacked into the session's directories like an upload (no links, no names out of them, sizes
capped). So the outputs routes, the approvals and the next resume read what a thread would have left.

A cancel (DELETE) is ``ray.cancel`` of the task; a task whose worker dies is the session's failure with
the status ``failed_worker_lost`` and an error that says so, never a session left running; a result that
is refused, ``failed_worker_result``.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import threading
import time
from pathlib import Path
from typing import Any

from agent.errors import FerryAgentError
from agent.migration.facade import (
    ApprovalRequest,
    HandoverRefused,
    MigrationOptions,
    MigrationSnapshot,
    NodeUpdate,
    ProgressFn,
    RunScheduler,
    export_checkpoint,
    import_checkpoint,
    load,
)
from agent.migration.paths import artifacts_root, session_dir, session_out, session_repo
from agent.service import bundle, ray_task
from agent.service.executor import BEFORE_RESULT, ExecutorFailure, SessionCancelled
from agent.service.settings import ServiceSettings
from agent.service.store import SessionRow
from agent.service.uploads import SourceRefused, UploadLimits

logger = logging.getLogger(__name__)

WORKER_LOST = "failed_worker_lost"
RESULT_REFUSED = "failed_worker_result"
_WAIT_S = 0.5
_CANCEL_GRACE_S = 10.0
RESULT_FILES = 20000  # files one bundle of outputs and run artifacts may hold (at least the upload limit)
RESULT_RATIO = 1000.0  # run artifacts (JSON, logs) compress far better than a repository


class RayUnavailable(FerryAgentError):
    """Ray is not installed, or the cluster cannot be reached."""


class RemoteFailure(ExecutorFailure):
    """The migration, or the task around it, failed on its Ray worker (the message is its error as a thread
    would record it: ``Type: message``)."""


class WorkerLost(ExecutorFailure):
    """The Ray task died (its worker or node was lost, or Ray failed it) before it sent its result."""

    status = WORKER_LOST


class ResultRefused(ExecutorFailure):
    """What the Ray task sent back is refused (outputs that are not a safe bundle, a checkpoint naming files
    outside the session); nothing of it is kept."""

    status = RESULT_REFUSED


def _ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise RayUnavailable("--executor ray needs Ray: install Ferry's ray extra (pip install -e '.[ray]')") from exc
    return ray


def _reachable(address: str, timeout_s: float = 10.0) -> None:
    """Fail at once when nothing answers at HOST:PORT (ray.init would retry for minutes); Ray's own schemes
    (``ray://``) are left to Ray."""
    if "://" in address:
        return
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise RayUnavailable(f"--ray-address {address!r} is not HOST:PORT (the cluster's GCS address), 'auto' "
                             "or 'local'")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise RayUnavailable(f"cannot reach the Ray cluster at {address}: {exc.strerror or exc}; start it (ray "
                             "start --head) or give its address, or use --ray-address local") from exc


def check_ray(address: str) -> None:
    """RayUnavailable, saying what to do, when Ray is not installed or nothing answers at ``address``."""
    _ray()
    if address not in ("local", "auto"):
        _reachable(address)


class RayExecutor:
    def __init__(self, settings: ServiceSettings) -> None:
        self.settings = settings
        self.runs = RunScheduler()  # no run of a session is this process's; the interface's, empty
        self._started_here = False
        self._remote: Any = None

    def open(self) -> None:
        ray = _ray()
        address = self.settings.ray_address
        if not ray.is_initialized():
            if address not in ("local", "auto"):
                _reachable(address)
            try:
                if address == "local":
                    ray.init(num_cpus=self.settings.workers, include_dashboard=False, log_to_driver=False)
                else:
                    ray.init(address=address, log_to_driver=False)
            except Exception as exc:
                raise RayUnavailable(f"cannot reach the Ray cluster at {address}: {exc}") from exc
            self._started_here = True
        self._remote = ray.remote(num_cpus=1, max_retries=0)(ray_task.run_attempt)
        logger.info("migrations run as Ray tasks on %s", address)

    def close(self) -> None:
        if self._started_here:
            _ray().shutdown()
            self._started_here = False

    # -- one start or resume ---------------------------------------------------------------------

    def start(self, row: SessionRow, opts: MigrationOptions, progress: ProgressFn,
              stop: threading.Event) -> MigrationSnapshot:
        return self._run(row, opts.model_dump(mode="json"), None, None, progress, stop)

    def resume(self, row: SessionRow, answer: dict[str, Any] | None, progress: ProgressFn,
               stop: threading.Event) -> MigrationSnapshot:
        saved = export_checkpoint(row.migration_id, self.settings.data_dir)
        if saved is None:
            raise RemoteFailure(f"migration {row.migration_id} has no checkpoint to resume from")
        return self._run(row, None, answer, saved, progress, stop)

    def _run(self, row: SessionRow, options: dict[str, Any] | None, answer: dict[str, Any] | None,
             checkpoint: str | None, progress: ProgressFn, stop: threading.Event) -> MigrationSnapshot:
        ray = _ray()
        s = self.settings
        sent = {ray_task.REPO: session_repo(s.data_dir, row.id)}
        if checkpoint is not None:  # a resume: the runs made so far come along (the reference, the checks)
            sent[ray_task.ARTIFACTS] = artifacts_root(s.data_dir, row.migration_id)
        limit = s.uploads.max_unpacked_bytes + s.ray_result_bytes
        limits = s.uploads.model_copy(update={"max_bytes": limit, "max_unpacked_bytes": limit,
                                              "max_files": max(s.uploads.max_files, RESULT_FILES) * 2,
                                              "max_ratio": RESULT_RATIO})
        spec = ray_task.Attempt(sid=row.id, attempt=row.attempt, migration_id=row.migration_id,
                                data_dir=str(s.data_dir), options=options, answer=answer,
                                result_bytes=s.ray_result_bytes, repo_limits=limits)
        repo = bundle.pack(sent, limit)
        gen = self._remote.remote(spec.model_dump_json(), repo, checkpoint)
        try:
            done = self._follow(ray, gen, progress, stop)
        except BaseException:
            self._cancel(ray, gen)
            raise
        if stop.is_set():  # stopped as the result came (a DELETE, a lost lease): nothing of it is written
            raise SessionCancelled("cancelled")
        progress(BEFORE_RESULT, NodeUpdate())  # LeaseLost when another server holds the session now
        self._take_result(row, done)
        if done.get("error"):
            raise RemoteFailure(str(done["error"]))
        return load(row.migration_id, s.data_dir)

    def _follow(self, ray: Any, gen: Any, progress: ProgressFn, stop: threading.Event) -> dict[str, Any]:
        """Each progress item handed to ``progress`` as it comes; the task's last item."""
        while True:
            if stop.is_set():
                raise SessionCancelled("cancelled")
            ready, _ = ray.wait([gen], timeout=_WAIT_S)
            if not ready:
                continue
            try:
                ref = next(gen)
            except StopIteration:
                raise WorkerLost("the Ray task ended without sending its result") from None
            try:
                item = ray.get(ref)
            except ray.exceptions.RayTaskError as exc:  # the task's own code raised
                cause = exc.cause if isinstance(exc.cause, BaseException) else exc
                raise RemoteFailure(f"{type(cause).__name__}: {str(cause)[:1000]}") from exc
            except Exception as exc:  # WorkerCrashedError, NodeDiedError, ObjectLostError, ...
                first = str(exc).splitlines()[0][:300] if str(exc) else ""
                raise WorkerLost(f"the Ray task running the migration died ({type(exc).__name__}): {first}") from exc
            if not isinstance(item, dict):
                raise ResultRefused("the Ray task sent something that is not a progress item")
            if item.get("kind") == "done":
                return item
            if item.get("kind") == "progress":
                progress(str(item.get("node")), _update(item))

    def _cancel(self, ray: Any, gen: Any) -> None:
        """The task stopped: asked first (its runs end, its directory goes), killed when it has not ended
        within ``_CANCEL_GRACE_S``."""
        try:
            ray.cancel(gen)
            deadline = time.monotonic() + _CANCEL_GRACE_S
            while time.monotonic() < deadline:
                ready, _ = ray.wait([gen], timeout=_WAIT_S)
                if not ready:
                    continue
                try:
                    ray.get(next(gen))
                except Exception:  # StopIteration, TaskCancelledError: it ended
                    return
            ray.cancel(gen, force=True)
        except Exception as exc:
            logger.debug("cancelling a Ray task: %s", exc)

    def _take_checkpoint(self, row: SessionRow, text: str) -> None:
        out = session_out(self.settings.data_dir, row.id, row.attempt)

        def check(state: MigrationSnapshot) -> None:  # the service reads these: nothing outside the session's
            outputs = state.outputs
            paths = [outputs.dir, outputs.patch, outputs.report, outputs.result, outputs.trajectory] \
                if outputs is not None else []
            for p in paths:  # lexically inside is not enough: out/../../etc/passwd is "relative to" out
                if p is not None and (not os.path.isabs(p) or ".." in Path(p).parts
                                      or not Path(os.path.normpath(p)).is_relative_to(out)):
                    raise HandoverRefused(f"an output path outside the session's ({p})")
            for rel in state.files:
                if rel.startswith("/") or ".." in Path(rel).parts:
                    raise HandoverRefused(f"an edited file outside the repository ({rel!r})")

        try:
            import_checkpoint(row.migration_id, self.settings.data_dir, text, check=check)
        except HandoverRefused as exc:
            raise ResultRefused(f"the Ray task sent a checkpoint that is refused: {exc}") from None

    def _take_result(self, row: SessionRow, done: dict[str, Any]) -> None:
        """The task's result kept: its bundle unpacked and checked, its checkpoint checked and saved, then
        the bundle's ``out`` and ``artifacts`` moved to the session's out dir and the attempt's artifacts.
        ResultRefused, and nothing of it kept, when the bundle or the checkpoint is refused."""
        data = done.get("bundle")
        if not isinstance(data, bytes):
            raise ResultRefused("the Ray task sent no outputs")
        s = self.settings
        landing = session_dir(s.data_dir, row.id) / f".ray-{row.attempt}"
        shutil.rmtree(landing, ignore_errors=True)
        landing.mkdir(parents=True)
        limits = UploadLimits(max_bytes=s.ray_result_bytes, max_files=max(s.uploads.max_files, RESULT_FILES),
                              max_unpacked_bytes=s.ray_result_bytes, max_ratio=RESULT_RATIO)
        try:
            got = bundle.unpack(data, landing, [ray_task.OUT, ray_task.ARTIFACTS], limits)
            if done.get("checkpoint") is not None:
                self._take_checkpoint(row, str(done["checkpoint"]))
            for name, dest in ((ray_task.OUT, session_out(s.data_dir, row.id, row.attempt)),
                               (ray_task.ARTIFACTS, artifacts_root(s.data_dir, row.migration_id))):
                if name in got:
                    shutil.rmtree(dest, ignore_errors=True)
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    got[name].rename(dest)
        except SourceRefused as exc:
            raise ResultRefused(f"the Ray task sent outputs that are refused: {exc}") from None
        finally:
            shutil.rmtree(landing, ignore_errors=True)


def _update(item: dict[str, Any]) -> NodeUpdate:
    values = item.get("values")
    asked = item.get("interrupts") or []
    return NodeUpdate(values=values if isinstance(values, dict) else {},
                      interrupts=[ApprovalRequest.model_validate(q) for q in asked if isinstance(q, dict)])
