"""The run scheduler: one object owns a process's background runs and what they fork from.

A migration's runs are mostly waiting on a child process, and several do not depend on each
other: the reference run (the original code on CPU) needs nothing the scan, rewrite or target run
produce, and the tests of an iteration need only that iteration's code. :class:`RunScheduler`
starts such a run on a worker thread under a key (``start``), and the node that needs the result
joins it (``join``); it cancels runs whose result nobody will want (``cancel``, ``cancel_prefix``),
reuses a run that finished before an earlier Ferry process stopped (``finished``: the runner writes
each finished run's ``result.json`` into its artifacts dir), and prewarms what the runs and the
parity tools need (``prewarm_runs``: the warm interpreter the sandboxed runs fork from;
``prewarm_imports``: torch and the parity/profile tools in this process).

The graph gets the scheduler through its runtime context (``agent.migration.graph.MigrationContext``), never
through a module global: the CLI makes one before it builds anything (``agent.migration.early``), the
service one per app, a test its own. Only as many runs go side by side as the machine has cores
(``FERRY_PARALLEL_RUNS`` overrides; 1 turns side-by-side runs off).

This module stays light (no LangGraph, no torch): the CLI starts runs with it before those load.
"""

from __future__ import annotations

import atexit
import contextvars
import importlib
import logging
import threading
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from sandbox import hostmem
from tools.runner.models import RunResult

logger = logging.getLogger(__name__)

PARALLEL_ENV = hostmem.PARALLEL_ENV
RunFn = Callable[[threading.Event], RunResult]

# Modules the migration process needs later (parity compare, profile report); importing them on
# a thread while the first runs execute takes torch's import off the critical path.
PREWARM_MODULES = ("torch", "tools.parity.compare", "tools.profile.report")
STOP_GRACE_S = 10.0


@dataclass
class _Job:
    future: Future[RunResult]
    cancel: threading.Event
    thread: threading.Thread


def parallel_limit() -> int:
    """How many runs may go side by side: ``FERRY_PARALLEL_RUNS`` if set (1 turns side-by-side
    runs off), else this process's usable cores (``sandbox.hostmem.parallel_runs``: the memory
    budget counts the same number)."""
    return hostmem.parallel_runs()


def finished(artifacts: Path) -> RunResult | None:
    """The result a finished (not cancelled) run left in ``artifacts`` (``result.json``, written by
    the host into a directory no sandbox sees), if any."""
    path = Path(artifacts) / "result.json"
    try:
        result = RunResult.model_validate_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, ValidationError):
        return None
    return None if result.status == "cancelled" else result


class RunScheduler:
    """Background runs of one process, by key (``"<migration id>:<label>"``). Thread-safe."""

    def __init__(self) -> None:
        self._jobs: dict[str, _Job] = {}
        self._stopping: list[_Job] = []  # cancelled, still ending: waited for at close
        self._lock = threading.Lock()
        self._ended = 0  # background runs ended so far, and those whose thread still works (wait_for_an_end)
        self._live = 0
        self._change = threading.Condition(self._lock)  # notified as each run ends
        self._prewarm: threading.Thread | None = None
        self._closed = False
        atexit.register(self.close)

    # --- background runs -----------------------------------------------------------------
    def start(self, key: str, fn: RunFn) -> bool:
        """Start ``fn(cancel_event)`` on a worker thread under ``key``; False if one is already running."""
        with self._lock:
            job = self._jobs.get(key)
            if self._closed or (job is not None and not job.future.done()):
                return False
            fut: Future[RunResult] = Future()
            cancel = threading.Event()
            # the starter's context goes with the run (the migration's run environment, agent.migration.adapters)
            ctx = contextvars.copy_context()
            thread = threading.Thread(target=ctx.run, args=(self._work, fut, fn, cancel), name=f"ferry-run {key}",
                                      daemon=True)
            thread.start()  # (its end waits for this lock: counted below before it can end)
            self._jobs[key] = _Job(fut, cancel, thread)
            self._live += 1
        logger.info("background run %s started", key)
        return True

    def _work(self, fut: Future[RunResult], fn: RunFn, cancel: threading.Event) -> None:
        try:
            if not fut.set_running_or_notify_cancel():
                return
            try:
                fut.set_result(fn(cancel))
            except BaseException as exc:  # handed to whoever joins the run
                fut.set_exception(exc)
        finally:  # (a run that never started ends here too: it holds no core)
            with self._change:
                self._live -= 1
                self._ended += 1
                self._change.notify_all()

    def running(self, prefix: str = "") -> list[str]:
        with self._lock:
            return [k for k, j in self._jobs.items() if k.startswith(prefix) and not j.future.done()]

    def has(self, key: str) -> bool:
        with self._lock:
            return key in self._jobs

    def join(self, key: str, artifacts: Path) -> RunResult | None:
        """Wait for the run under ``key`` and return its result (exceptions re-raised); without a job
        in this process, a finished result left on disk; None when neither exists or it was cancelled."""
        with self._lock:
            job = self._jobs.get(key)
        if job is None:
            return finished(artifacts)
        try:  # listed while it is waited for, so that a cancel (a session's, a job's) still reaches it
            result = job.future.result()
        finally:
            with self._lock:
                if self._jobs.get(key) is job:
                    del self._jobs[key]
        return None if result.status == "cancelled" else result

    def cancel(self, key: str) -> bool:
        """Stop the run under ``key`` (it ends with status ``cancelled``); False if there is none."""
        with self._lock:
            job = self._jobs.pop(key, None)
            if job is not None:
                self._stopping.append(job)
        if job is None:
            return False
        job.cancel.set()
        logger.info("background run %s cancelled", key)
        return True

    def cancel_prefix(self, prefix: str, keep: str | None = None) -> list[str]:
        with self._lock:
            keys = [k for k in self._jobs if k.startswith(prefix) and k != keep]
        return [k for k in keys if self.cancel(k)]

    def wait_for_core(self, key: str) -> None:
        """Wait until the run under ``key`` or another background run in flight has ended (a core is then free
        beside ``key``'s run, or ``key``'s result is ready); at once when ``key`` is not running or nothing else
        runs beside it."""
        with self._lock:
            job = self._jobs.get(key)
            others = [j.future for k, j in self._jobs.items() if k != key and not j.future.done()]
        if job is None or job.future.done() or not others:
            return
        wait([job.future, *others], return_when=FIRST_COMPLETED)

    def ended(self) -> int:
        """How many background runs have ended so far (:meth:`wait_for_an_end`'s ``seen``)."""
        with self._lock:
            return self._ended

    def wait_for_an_end(self, seen: int, until: threading.Event) -> int | None:
        """Wait until more background runs have ended than ``seen`` (:meth:`ended`; a core is then free, and a run
        that ended after the caller's last look counts too) or ``until`` is set (with :meth:`wake`); returns how
        many have ended, or None when none ended since ``seen`` and none is running (nothing will free a core)."""
        with self._change:
            while self._ended == seen and not until.is_set():
                if self._live == 0:
                    return None
                self._change.wait()
            return self._ended

    def wake(self) -> None:
        """Wake the callers of :meth:`wait_for_an_end` (one of them has had its ``until`` set)."""
        with self._change:
            self._change.notify_all()

    def spare_cores(self) -> int:
        """Run slots left beside the background runs in flight (a caller about to start its own
        foreground run needs at least 2 to add a background one)."""
        return parallel_limit() - len(self.running())

    # --- what the runs and the tools need ----------------------------------------------------
    def prewarm_runs(self, seed: int, env: dict[str, str] | None = None,
                     user_env: dict[str, str] | None = None) -> bool:
        """Start the warm interpreter the migration's sandboxed runs fork from (tools.runner.warm);
        False when warm starts are off or unavailable here (runs start cold). ``user_env``: the
        user's own variables of the runs (--env), which the interpreter must start with; default:
        the current migration's (``agent.migration.adapters.run_environment``), whose runs with an interpreter
        of the user's (--python) start cold: nothing is started for them."""
        from agent.migration.adapters import current_environment, side_by_side_env

        own = current_environment()
        if user_env is None and own is not None:
            if own.python is not None:
                return False
            user_env = own.env
        try:
            from tools.runner import warm

            started = bool(warm.prewarm(seed=seed, caller_env={**side_by_side_env(), **(env or {})},
                                        user_env=user_env or {}))
        except (ImportError, OSError) as exc:
            logger.info("no warm interpreter for this migration's runs: %s", exc)
            return False
        # At exit, runs stop before the warm interpreters close (exit handlers run last-registered
        # first): a run must not see its interpreter close under it and start again cold.
        atexit.unregister(self.close)
        atexit.register(self.close)
        return started

    def prewarm_imports(self, modules: tuple[str, ...] = PREWARM_MODULES) -> None:
        """Import ``modules`` on a daemon thread (once per scheduler); failures are left to the real import."""
        with self._lock:
            if self._prewarm is not None:
                return

            def work() -> None:
                for name in modules:
                    try:
                        importlib.import_module(name)
                    except Exception as exc:
                        logger.debug("prewarm import of %s failed: %s", name, exc)

            self._prewarm = threading.Thread(target=work, name="ferry-prewarm", daemon=True)
            self._prewarm.start()

    def wait_prewarm(self) -> None:
        """Let a prewarm in progress finish before this thread imports the same packages: two threads
        importing torch at once can meet in its circular imports and see a half-initialised module."""
        thread = self._prewarm
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    # --- lifecycle -----------------------------------------------------------------------
    def close(self, grace_s: float = STOP_GRACE_S) -> None:
        """Stop every run nobody will join (their children must not outlive Ferry) and wait for them,
        the cancelled ones too: a run's runner unmounts its space when it returns. Idempotent."""
        with self._lock:
            self._closed = True
            jobs = [*self._jobs.values(), *self._stopping]
            self._jobs.clear()
            self._stopping.clear()
        for job in jobs:
            job.cancel.set()
        for job in jobs:
            job.thread.join(timeout=grace_s)
        atexit.unregister(self.close)  # a scheduler per job (the service's GitHub jobs) leaves nothing behind

