"""reference_run: the ORIGINAL code on CPU with CUDA redirected to CPU, probe on.

The run starts in the background (``agent.background``) and goes on beside the scan, the rewrite
and the first target run, which do not need it; ``target_run`` joins it (``join_reference``) so
every later node sees it settled. A failed reference ends the migration as before: Ferry needs a
working reference to compare against.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

from agent import background, toolbox
from agent.errors import NeedsHuman, RunTimedOut, SandboxFailure
from agent.nodes.common import artifacts_dir, diagnosis_from_run, run_is_ok, run_summary, source_of, step
from agent.state import MigrationState, options_of
from tools.patch import list_source_files

logger = logging.getLogger(__name__)

LABEL = "reference"


def reference_key(state: MigrationState) -> str:
    return f"{state['migration_id']}:{LABEL}"


def _run(state: MigrationState, adir: Path, cancel: threading.Event | None) -> dict[str, Any]:
    opts = options_of(state)
    return toolbox.run(
        source_of(state), opts.run_command, device="cpu", redirect_cuda="cpu", probe=True, profile=False,
        timeout_s=opts.run_timeout_s, seed=opts.seed, artifacts_dir=adir, cancel=cancel,
    )


@step("reference_run")
def reference_run(state: MigrationState) -> dict[str, Any]:
    if state.get("reference") and run_is_ok(state["reference"]):
        return {"_summary": "already done"}
    adir = artifacts_dir(state, LABEL)
    done = background.finished(adir)
    if done is not None:  # finished before an earlier Ferry process stopped
        return settle_reference(state, done)
    adir.mkdir(parents=True, exist_ok=True)
    if background.parallel_limit() < 2:  # side-by-side runs are off: run it here and now
        return settle_reference(state, _run(state, adir, None))
    background.start(reference_key(state), lambda cancel: _run(state, adir, cancel))
    return {"reference": {"pending": True, "artifacts_dir": str(adir)},
            "_summary": "started (goes on beside the scan, rewrite and first target run)"}


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
