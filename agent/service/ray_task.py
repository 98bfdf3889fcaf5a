"""What a Ray worker runs for the service (:mod:`agent.service.ray_executor`): one start or resume of a
session's attempt, in a private directory of the worker, yielding the migration's progress as it goes
and its checkpoint and outputs at the end.

The private directory mirrors the service's data dir (``sessions/<sid>/repo``, ``out-<attempt>``,
``workspaces``, ``artifacts``, the SQLite checkpoints), so the migration runs exactly as it would in the
service's worker thread, with its own sandboxes; every path of it is rewritten to the service's before it
is sent (progress, checkpoint), and the service's to this one's when a checkpoint arrives. The
directory is removed when the task ends, however it ends.
"""

from __future__ import annotations

import logging
import os
import queue
import re
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agent.migration.facade import (
    DATABASE_URL_ENV,
    MigrationOptions,
    NodeUpdate,
    RunScheduler,
    cancel,
    export_checkpoint,
    import_checkpoint,
    resume,
    start,
)
from agent.migration.paths import artifacts_root, session_out, session_repo
from agent.service import bundle
from agent.service.uploads import UploadLimits

logger = logging.getLogger(__name__)
_POLL_S = 0.2
REPO, OUT, ARTIFACTS = "repo", "out", "artifacts"
PREFIX = "ferry-ray-"  # the private directories, in the worker's temporary directory
OWNER = "pid"  # in each: the process of the task that made it
STOP_WAIT_S = 30.0  # a cancelled task waits this long for its migration to stop before removing its directory


class _Stopped(Exception):
    """The task was cancelled: the migration stops at its next step."""


class Attempt(BaseModel):
    """One step of a session's attempt, as the service sends it."""

    model_config = ConfigDict(frozen=True)

    sid: str
    attempt: int = Field(ge=1)
    migration_id: str
    data_dir: str = Field(description="the service's data dir (its paths are rewritten to the worker's)")
    options: dict[str, Any] | None = Field(default=None, description="a start's MigrationOptions (JSON)")
    answer: dict[str, Any] | None = None
    result_bytes: int = Field(gt=0, description="at most this much of outputs and artifacts sent back")
    repo_limits: UploadLimits = Field(default_factory=UploadLimits, description="what the bundle sent may hold")


def rewriter(pairs: list[tuple[str, str]]) -> Callable[[str], str]:
    """A function replacing each ``from`` path (a whole path prefix, not a longer name) by its ``to``."""
    pairs = [(a, b) for a, b in dict.fromkeys(pairs) if a and a != b]
    if not pairs:
        return str
    table = dict(pairs)
    pattern = re.compile("|".join(re.escape(a) for a, _ in sorted(pairs, key=lambda p: -len(p[0])))
                         + r"(?![\w.-])")
    return lambda text: pattern.sub(lambda m: table[m.group(0)], text)


def _roots(a: Path, b: Path) -> list[tuple[str, str]]:
    """``a`` as given and as resolved, each to ``b``."""
    return [(str(a), str(b)), (str(a.resolve()), str(b))]


def run_attempt(spec_json: str, repo: bytes, checkpoint: str | None) -> Iterator[dict[str, Any]]:
    """The Ray task. ``repo``: the bundle of the session's repository copy and, for a resume, the attempt's
    run artifacts so far; ``checkpoint``: a resume's, as the service exported it. Yields ``{"kind":
    "progress", "node", "values", "interrupts"}`` after each node, then one ``{"kind": "done",
    "checkpoint", "bundle", "error"}``."""
    spec = Attempt.model_validate_json(spec_json)
    os.environ.pop(DATABASE_URL_ENV, None)  # this worker's own SQLite store; the service keeps the shared one
    root = Path(tempfile.mkdtemp(prefix=PREFIX))
    (root / OWNER).write_text(str(os.getpid()))
    sweep(root.parent)
    data = root / "data"
    service = Path(spec.data_dir)
    to_here = rewriter(_roots(service, data))
    to_service = rewriter(_roots(data, service))
    items: queue.Queue[dict[str, Any]] = queue.Queue()
    stop = threading.Event()
    runs = RunScheduler()
    thread: threading.Thread | None = None
    try:
        dest = session_repo(data, spec.sid)
        dest.parent.mkdir(parents=True)
        landing = root / "landing"
        landing.mkdir()
        got = bundle.unpack(repo, landing, [REPO, ARTIFACTS], spec.repo_limits)
        if REPO in got:
            got[REPO].rename(dest)
        else:
            dest.mkdir()
        if ARTIFACTS in got:  # a resume's: the runs made before it (the reference the checks compare with)
            artifacts_root(data, spec.migration_id).parent.mkdir(parents=True, exist_ok=True)
            got[ARTIFACTS].rename(artifacts_root(data, spec.migration_id))
        if checkpoint is not None:
            import_checkpoint(spec.migration_id, data, checkpoint, to_here)

        def progress(node: str, update: NodeUpdate) -> None:
            if stop.is_set():  # the task was cancelled: the driver stops here
                raise _Stopped
            items.put({"kind": "progress", "node": node, "values": _json(update.values, to_service),
                       "interrupts": [_json(q.data(), to_service) for q in update.interrupts]})

        def drive() -> None:
            error: str | None = None
            try:
                if spec.options is not None:
                    opts = MigrationOptions.model_validate(_json(spec.options, to_here))
                    start(opts, migration_id=spec.migration_id, progress=progress, runs=runs, stop=stop)
                else:
                    resume(spec.migration_id, data, answer=spec.answer, progress=progress, runs=runs, stop=stop)
            except BaseException as exc:  # sent back as the session's error, as the worker thread records it
                error = to_service(f"{type(exc).__name__}: {exc}")
            items.put({"kind": "end", "error": error})

        thread = threading.Thread(target=drive, name=f"ferry-ray-{spec.sid}", daemon=True)
        thread.start()
        while True:
            try:
                item = items.get(timeout=_POLL_S)
            except queue.Empty:
                continue
            if item["kind"] == "end":
                break
            yield item
        thread.join()
        error = item["error"]
        saved = export_checkpoint(spec.migration_id, data, to_service)
        out = {OUT: session_out(data, spec.sid, spec.attempt), ARTIFACTS: artifacts_root(data, spec.migration_id)}
        try:
            packed = bundle.pack(out, spec.result_bytes)
        except bundle.BundleTooLarge as exc:
            packed, error = bundle.pack({}, spec.result_bytes), error or f"the outputs were not sent back: {exc}"
        yield {"kind": "done", "checkpoint": saved, "bundle": packed, "error": error}
    finally:  # ray.cancel, or the end: the runs stop, the driver stops at its next step, the directory goes
        cancel("", runs, stop)
        if thread is not None:
            thread.join(timeout=STOP_WAIT_S)
        shutil.rmtree(root, ignore_errors=True)


def sweep(parent: Path) -> None:
    """Remove the private directories of tasks whose process is gone (a worker killed outright cannot)."""
    for entry in parent.glob(PREFIX + "*"):
        try:
            pid = int((entry / OWNER).read_text())
        except (OSError, ValueError):
            continue  # not one of ours, or being made
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            shutil.rmtree(entry, ignore_errors=True)
        except OSError:
            continue  # alive (another user's): not ours to judge


def _json(value: Any, rewrite: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        return rewrite(value)
    if isinstance(value, dict):
        return {str(k): _json(v, rewrite) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json(v, rewrite) for v in value]
    if value is None or isinstance(value, bool | int | float):
        return value
    return rewrite(str(value))
