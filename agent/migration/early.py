"""What a new migration can start before its graph exists: the reference run and the warm interpreter.

Neither needs anything the graph computes: the reference run is the original code with CUDA
redirected to CPU, and the warm interpreter (``tools.runner.warm``) only imports torch for the
tpx runs to come. Started by ``agent.migration.facade.start`` (the one caller), once the id is
known to have no state and before it imports LangGraph's graph and builds it, both go on while Ferry
itself starts up (about a second of imports on one core), on the :class:`~agent.migration.runs.RunScheduler`
the graph then gets. The ``reference_run`` node finds the run in flight and ``await_reference`` joins it, exactly
as when the node starts it itself; nothing here runs for a migration id that already has state
(a resume never restarts its reference run).

This module stays light (no LangGraph): importing it must not cost what it is meant to hide.
"""

from __future__ import annotations

import secrets
import threading
import time
from pathlib import Path

from agent.migration import adapters, run_cache
from agent.migration.paths import REFERENCE_LABEL, reference_artifacts
from agent.migration.runs import RunScheduler, finished, parallel_limit
from agent.migration.state import MigrationOptions
from tools.runner.models import RunResult


def new_migration_id() -> str:
    return time.strftime("m%Y%m%d-%H%M%S-") + secrets.token_hex(3)


def reference_key(migration_id: str) -> str:
    return f"{migration_id}:{REFERENCE_LABEL}"



def run_reference(opts: MigrationOptions, adir: Path, cancel: threading.Event | None,
                  timeout_s: float | None = None) -> RunResult:
    """The reference run: the original code on CPU, CUDA redirected to CPU, probe on. ``timeout_s``: default
    ``--run-timeout``, or the whole ``--max-wall`` when that is smaller (the run starts with the migration)."""
    if timeout_s is None:
        timeout_s = min(opts.run_timeout_s, opts.max_wall_s or opts.run_timeout_s)
    return adapters.run(
        Path(opts.source), opts.run_command, device="cpu", redirect_cuda="cpu", probe=True, profile=False,
        timeout_s=timeout_s, seed=opts.seed, artifacts_dir=adir, cancel=cancel,
        disk_limit_bytes=opts.disk_limit_bytes,
        environment=adapters.RunEnvironment.of(opts),
    )


def kept_reference(opts: MigrationOptions, adir: Path) -> RunResult | None:
    """The reference run an earlier migration of the same source, command and settings kept
    (``agent.migration.run_cache``), copied into ``adir``; None when there is none."""
    return run_cache.kept(opts, REFERENCE_LABEL, adir)


def keep_reference(opts: MigrationOptions, run: RunResult, migration_id: str) -> bool:
    """Keep a passing reference run for later migrations of the same code (not one that was itself kept)."""
    return run_cache.keep(opts, REFERENCE_LABEL, run, migration_id)


def start_reference(runs: RunScheduler, opts: MigrationOptions, migration_id: str, look_kept: bool = True) -> bool:
    """Start the reference run in the background unless it is running or finished already (or, with
    ``look_kept``, an earlier migration kept it: it is then copied in and reads as finished), or
    side-by-side runs are off; True when it is (now) in flight."""
    key = reference_key(migration_id)
    if runs.has(key):
        return True
    adir = reference_artifacts(opts.state_dir, migration_id)
    if finished(adir) is not None or (look_kept and kept_reference(opts, adir) is not None) or parallel_limit() < 2:
        return False
    adir.mkdir(parents=True, exist_ok=True)
    return runs.start(key, lambda cancel: run_reference(opts, adir, cancel))


def start_early(runs: RunScheduler, opts: MigrationOptions, migration_id: str) -> None:
    """For a migration with no state yet: warm interpreter, then the reference run."""
    if opts.python is None:  # warm interpreters are Ferry's own
        runs.prewarm_runs(opts.seed, user_env=opts.env)
    if Path(opts.source).is_dir():
        start_reference(runs, opts, migration_id)
