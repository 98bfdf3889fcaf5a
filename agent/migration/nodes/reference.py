"""reference_run / await_reference: the ORIGINAL code on CPU with CUDA redirected to CPU, probe on.

``reference_run`` starts the run in the background on the run scheduler (for a new migration it
is already in flight: ``agent.migration.early`` started it before the graph was built), and it goes on
beside the scan, the rewrite and the first target run, which do not need it. ``await_reference``,
after every target run, joins it once (a no-op when it is settled), so every later node sees it
settled. A failed reference ends the migration: Ferry needs a working reference to compare against.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import cast

from agent.errors import EnvironmentMissing, FerryAgentError, NeedsHuman, RunTimedOut, SandboxFailure
from agent.migration import early, run_cache
from agent.migration.budget import Clock, ensure_time_for, run_timeout
from agent.migration.environment import environment_failure, rendezvous_failure
from agent.migration.nodes.common import SUMMARY, Update, artifacts_dir, diagnosis_from_run, source_of, step
from agent.migration.nodes.golden import start_golden
from agent.migration.paths import REFERENCE_LABEL
from agent.migration.records import RunRecord
from agent.migration.runs import RunScheduler, finished
from agent.migration.state import MigrationState, dump, migration_id_of, options_of, reference_of, reference_pending_of
from tools.patch import list_source_files
from tools.runner.models import RunResult

logger = logging.getLogger(__name__)

LABEL = REFERENCE_LABEL


def reference_key(state: MigrationState) -> str:
    return early.reference_key(migration_id_of(state))


def _run(state: MigrationState, adir: Path, cancel: threading.Event | None) -> RunResult:
    """The reference run now (in this process: the one that started it is gone), within the budget left;
    the one an earlier migration of the same code kept, when there is one."""
    kept = early.kept_reference(options_of(state), adir)
    if kept is not None:
        return kept
    ensure_time_for(state, "reference", "the reference run")
    return early.run_reference(options_of(state), adir, cancel, timeout_s=run_timeout(state))


@step("reference_run")
def reference_run(state: MigrationState, runs: RunScheduler) -> Update:
    ref = reference_of(state)
    if ref is not None and ref.ok:
        return {SUMMARY: "already done"}
    adir = artifacts_dir(state, LABEL)
    if runs.has(reference_key(state)):  # started before the graph (agent.migration.early)
        return {"reference_pending": True,
                SUMMARY: "in flight since the migration started (beside the scan, rewrite and first target run)"}
    done = finished(adir)
    if done is not None:  # finished before an earlier Ferry process stopped (or kept from an earlier migration)
        return settle_reference(state, done)
    kept = early.kept_reference(options_of(state), adir)
    if kept is not None:
        return settle_reference(state, kept)
    if not early.start_reference(runs, options_of(state), migration_id_of(state), look_kept=False):
        return settle_reference(state, _run(state, adir, None))  # side-by-side runs are off
    return {"reference_pending": True, SUMMARY: "started (goes on beside the scan, rewrite and first target run)"}


@step("await_reference")
def await_reference(state: MigrationState, runs: RunScheduler) -> Update:
    """Join the reference run (waiting for it, or running it now when the process that started it
    is gone); nothing to do once it is settled."""
    if not reference_pending_of(state):
        return {SUMMARY: "settled already"}
    adir = artifacts_dir(state, LABEL)
    run = runs.join(reference_key(state), adir)
    if run is None:
        logger.info("the reference run did not finish in an earlier process; running it now")
        run = _run(state, adir, None)
    update = settle_reference(state, run)
    if run.ok and start_golden(cast(MigrationState, {**state, **update}), runs):
        update[SUMMARY] += "; the fp32 golden run (autocast off) started beside it"
    return update


def cancel_reference(state: MigrationState, runs: RunScheduler) -> Update:
    """Stop a pending reference run nobody will need (the migration ended before its target run)."""
    if not reference_pending_of(state):
        return {}
    runs.cancel(reference_key(state))
    return {"reference_pending": False}


def settle_reference(state: MigrationState, run: RunResult) -> Update:
    opts = options_of(state)
    origin = run_cache.reused_from(run.artifacts_dir)
    record = RunRecord.of("reference", run, reused=origin is not None)
    update: Update = {"reference": dump(run), "reference_pending": False, "runs": [dump(record)]}
    if run.ok and origin is not None:
        update[SUMMARY] = (f"reused: the reference run of migration {origin or '?'} (same source files, command and "
                           f"settings; ok in {run.duration_s:.1f}s there), not run again")
        return update
    if run.ok:
        early.keep_reference(opts, run, migration_id_of(state))
        update[SUMMARY] = f"ok in {run.duration_s:.1f}s (CUDA redirected to CPU)"
        return update
    known = list_source_files(source_of(state))
    diag = diagnosis_from_run(run, "run", known)
    missing = environment_failure(diag, run.stderr_tail + "\n" + run.stdout_tail, known, opts.python or run.python)
    rendezvous = rendezvous_failure(run, "the reference run (original code on CPU)")
    err: FerryAgentError
    if missing is not None:
        err = EnvironmentMissing(missing.message())
    elif rendezvous is not None:
        err = EnvironmentMissing(rendezvous)
    elif run.status == "timeout":
        if opts.max_wall_s is not None and run.duration_s < opts.run_timeout_s - 1:  # the budget's cap stopped it
            err = Clock.of(state).stopped("the reference run (original code on CPU)", run.duration_s)
        else:
            err = RunTimedOut(f"the reference run (original code on CPU) timed out after {opts.run_timeout_s:.0f}s; "
                              "pass a shorter --run command or a larger --run-timeout")
    elif diag.kind == "teardown_hang":
        err = NeedsHuman(
            f"the original code ran with CUDA redirected to CPU and printed its output, but did not exit by itself "
            f"({diag.first_line}; at {diag.where()}). Ferry needs a reference run that ends; the stuck processes' "
            "stacks are in the reference run's result.json."
        )
    elif run.status == "sandbox_error":
        why = (run.error or run.stderr_tail)[-500:]
        err = SandboxFailure(f"the sandbox could not run the reference command: {why}")
    else:
        err = NeedsHuman(
            f"the original code does not run with CUDA redirected to CPU ({diag.kind} at {diag.where()}: "
            f"{diag.exc_type} {diag.first_line}). Ferry needs a working reference run to compare against; fix "
            "the command or the code first."
        )
    update.update({"status": err.status, "summary": str(err), SUMMARY: f"reference failed: {err}"})
    return update
