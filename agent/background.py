"""Runs that go on while the graph moves: side-by-side sandboxed runs, joined where they are needed.

A migration's runs are mostly waiting on a child process, and several of them do not depend on
each other: the reference run (the original code on CPU) needs nothing the scan, rewrite or
target run produce, and the tests of an iteration need only that iteration's code. Started here,
such a run goes on in a worker thread while the graph continues; the node that needs its result
joins it.

Durability: the runner writes each finished run's ``result.json`` into its artifacts dir, so a
run that finished before Ferry was killed is found there on resume (``finished``); one that had
not finished is simply run again. A cancelled run (its result is no longer wanted: the code it
ran has changed) is stopped at once and never counted as finished.

Only as many runs go side by side as the machine has cores (``spare_cores``; ``FERRY_PARALLEL_RUNS``
overrides, 1 turns it off): on a 2-core machine a speculative run beside two busy ones would only
slow them down. The reference run always starts in the background: the work beside it (scan,
rewrite, the first target run) is needed anyway.
"""

from __future__ import annotations

import atexit
import importlib
import json
import logging
import os
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

logger = logging.getLogger(__name__)

PARALLEL_ENV = "FERRY_PARALLEL_RUNS"
RunFn = Callable[[threading.Event], dict[str, Any]]

# Modules the migration process needs later (parity compare, profile report); importing them on
# a thread while the first runs execute takes torch's import off the critical path.
PREWARM_MODULES = ("torch", "tools.parity.compare", "tools.profile.report")


@dataclass
class _Job:
    future: Future
    cancel: threading.Event
    thread: threading.Thread


_jobs: dict[str, _Job] = {}
_lock = threading.Lock()
# Cancelled runs still winding down: Ferry's exit waits for them too (their sandbox's mount and
# cgroup are released in their own ``finally``).
_stopping: list[_Job] = []


def _work(fut: Future, fn: RunFn, cancel: threading.Event) -> None:
    if not fut.set_running_or_notify_cancel():
        return
    try:
        fut.set_result(fn(cancel))
    except BaseException as exc:  # handed to whoever joins the run
        fut.set_exception(exc)


def start(key: str, fn: RunFn) -> bool:
    """Start ``fn(cancel_event)`` on a worker thread under ``key``; False if one is already running."""
    with _lock:
        job = _jobs.get(key)
        if job is not None and not job.future.done():
            return False
        fut: Future = Future()
        cancel = threading.Event()
        thread = threading.Thread(target=_work, args=(fut, fn, cancel), name=f"ferry-bg {key}", daemon=True)
        _jobs[key] = _Job(fut, cancel, thread)
        thread.start()
    logger.info("background run %s started", key)
    return True


def running(prefix: str = "") -> list[str]:
    with _lock:
        return [k for k, j in _jobs.items() if k.startswith(prefix) and not j.future.done()]


def has(key: str) -> bool:
    with _lock:
        return key in _jobs


def finished(artifacts: Path) -> dict[str, Any] | None:
    """The result a finished (not cancelled) run left in ``artifacts`` (``result.json``), if any."""
    path = Path(artifacts) / "result.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("status") in (None, "cancelled"):
        return None
    return data


def join(key: str, artifacts: Path) -> dict[str, Any] | None:
    """Wait for the run under ``key`` and return its result (exceptions re-raised); without a job
    in this process, a finished result left on disk; None when neither exists."""
    with _lock:
        job = _jobs.pop(key, None)
    if job is not None:
        result = job.future.result()
        if result.get("status") != "cancelled":
            return result
        return None
    return finished(artifacts)


def cancel(key: str) -> bool:
    """Stop the run under ``key`` (it ends with status ``cancelled``); False if there is none."""
    with _lock:
        job = _jobs.pop(key, None)
    if job is None:
        return False
    job.cancel.set()
    with _lock:
        _stopping[:] = [j for j in _stopping if j.thread.is_alive()] + [job]
    logger.info("background run %s cancelled", key)
    return True


def cancel_prefix(prefix: str, keep: str | None = None) -> list[str]:
    with _lock:
        keys = [k for k in _jobs if k.startswith(prefix) and k != keep]
    return [k for k in keys if cancel(k)]


def parallel_limit() -> int:
    """How many runs may go side by side: ``FERRY_PARALLEL_RUNS`` if set (1 turns side-by-side
    runs off), else this process's usable cores."""
    raw = os.environ.get(PARALLEL_ENV, "").strip()
    if raw:
        try:
            return max(1, int(raw))
        except ValueError:
            logger.warning("%s=%r is not a number; using the core count", PARALLEL_ENV, raw)
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def spare_cores() -> int:
    """Run slots left beside the background runs in flight in this process (a caller about to
    start its own foreground run needs at least 2 to add a background one)."""
    return parallel_limit() - len(running())


_prewarm_started = False
_prewarm_thread: threading.Thread | None = None


def prewarm(modules: tuple[str, ...] = PREWARM_MODULES) -> None:
    """Import ``modules`` on a daemon thread (once per process); failures are left to the real import."""
    global _prewarm_started, _prewarm_thread
    with _lock:
        if _prewarm_started:
            return
        _prewarm_started = True

    def work() -> None:
        for name in modules:
            try:
                importlib.import_module(name)
            except Exception as exc:  # the node that needs it reports it properly
                logger.debug("prewarm import of %s failed: %s", name, exc)

    _prewarm_thread = threading.Thread(target=work, name="ferry-prewarm", daemon=True)
    _prewarm_thread.start()


def wait_prewarm() -> None:
    """Let a prewarm in progress finish before this thread imports the same packages: two threads
    importing torch at once can meet in its circular imports and see a half-initialised module."""
    thread = _prewarm_thread
    if thread is not None and thread is not threading.current_thread():
        thread.join()


def stop_runs_first() -> None:
    """Make Ferry's exit stop runs before the exit handlers registered so far (the warm
    interpreters' among them) run: handlers run last-registered first, and a run must not see its
    warm interpreter close under it and start again cold. Call after starting warm interpreters."""
    atexit.unregister(_stop_all)
    atexit.register(_stop_all)


@atexit.register
def _stop_all(grace_s: float = 10.0) -> None:
    """At exit, stop runs nobody will join (their children must not outlive Ferry)."""
    with _lock:
        jobs = list(_jobs.values()) + _stopping
        _jobs.clear()
        _stopping.clear()
    for job in jobs:
        job.cancel.set()
    for job in jobs:
        job.thread.join(timeout=grace_s)
