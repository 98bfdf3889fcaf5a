"""reference_run: the ORIGINAL code on CPU with CUDA redirected to CPU, probe on.

The run starts in the background (``agent.background``), for a new migration already before the
graph is built (``agent.early``), and goes on beside the scan, the rewrite and the first target
run, which do not need it; ``target_run`` joins it (``join_reference``) so
every later node sees it settled. A failed reference ends the migration as before: Ferry needs a
working reference to compare against.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

from agent import background, early
from agent.errors import NeedsHuman, RunTimedOut, SandboxFailure
from agent.nodes.common import artifacts_dir, diagnosis_from_run, run_is_ok, run_summary, source_of, step
from agent.state import MigrationState, options_of
from tools.patch import list_source_files

logger = logging.getLogger(__name__)

LABEL = early.REFERENCE_LABEL


def reference_key(state: MigrationState) -> str:
    return early.reference_key(state["migration_id"])


def _run(state: MigrationState, adir: Path, cancel: threading.Event | None) -> dict[str, Any]:
    return early.run_reference(options_of(state), adir, cancel)


@step("reference_run")
def reference_run(state: MigrationState) -> dict[str, Any]:
    if state.get("reference") and run_is_ok(state["reference"]):
        return {"_summary": "already done"}
    adir = artifacts_dir(state, LABEL)
    pending = {"reference": {"pending": True, "artifacts_dir": str(adir)},
               "_summary": "started (goes on beside the scan, rewrite and first target run)"}
    if background.has(reference_key(state)):  # started before the graph (agent.early)
        return {**pending, "_summary": "in flight since the migration started (beside the scan, rewrite "
                                       "and first target run)"}
    done = background.finished(adir)
    if done is not None:  # finished before an earlier Ferry process stopped
        return settle_reference(state, done)
    if not early.start_reference(options_of(state), state["migration_id"]):  # side-by-side runs are off
        return settle_reference(state, _run(state, adir, None))
    return pending


def join_reference(state: MigrationState) -> dict[str, Any]:
    """The update that settles a pending reference run (waiting for it, or running it now when the
    process that started it is gone); ``{}`` when it is settled already."""
    ref = state.get("reference") or {}
    if not ref.get("pending"):
        return {}
    adir = artifacts_dir(state, LABEL)
    run = background.join(reference_key(state), adir)
    if run is None:
        logger.info("the reference run did not finish in an earlier process; running it now")
        run = _run(state, adir, None)
    return settle_reference(state, run)


def cancel_reference(state: MigrationState) -> dict[str, Any]:
    """Stop a pending reference run nobody will need (the migration ended before its target run)."""
    ref = state.get("reference") or {}
    if not ref.get("pending"):
        return {}
    background.cancel(reference_key(state))
    return {"reference": {**ref, "pending": False, "status": "cancelled"}}


def settle_reference(state: MigrationState, run: dict[str, Any]) -> dict[str, Any]:
    opts = options_of(state)
    update: dict[str, Any] = {"reference": run, "runs": [run_summary("reference", run)]}
    if run_is_ok(run):
        update["_summary"] = f"ok in {run.get('duration_s', 0):.1f}s (CUDA redirected to CPU)"
        return update
    status = run.get("status")
    diag = diagnosis_from_run(run, "run", list_source_files(source_of(state)))
    if status == "timeout":
        err: Exception = RunTimedOut(f"the reference run (original code on CPU) timed out after {opts.run_timeout_s:.0f}s; "
                                     "pass a shorter --run command or a larger --run-timeout")
    elif status == "sandbox_error":
        err = SandboxFailure(f"the sandbox could not run the reference command: {(run.get('stderr_tail') or '')[-500:]}")
    else:
        err = NeedsHuman(
            f"the original code does not run with CUDA redirected to CPU ({diag.kind} at {diag.where()}: "
            f"{diag.exc_type} {diag.message.splitlines()[0] if diag.message else ''}). Ferry needs a working "
            "reference run to compare against; fix the command or the code first."
        )
    update.update({"status": err.status, "summary": str(err), "_summary": f"reference failed: {err}"})  # type: ignore[attr-defined]
    return update
