"""reference_run: the ORIGINAL code on CPU with CUDA redirected to CPU, probe on."""

from __future__ import annotations

import logging
from typing import Any

from agent import toolbox
from agent.errors import NeedsHuman, RunTimedOut, SandboxFailure
from agent.nodes.common import artifacts_dir, diagnosis_from_run, run_is_ok, run_summary, source_of, step
from agent.state import MigrationState, options_of
from tools.patch import list_source_files

logger = logging.getLogger(__name__)


@step("reference_run")
def reference_run(state: MigrationState) -> dict[str, Any]:
    if state.get("reference") and run_is_ok(state["reference"]):
        return {"_summary": "already done"}
    opts = options_of(state)
    run = toolbox.run(
        source_of(state), opts.run_command, device="cpu", redirect_cuda="cpu", probe=True, profile=False,
        timeout_s=opts.run_timeout_s, seed=opts.seed, artifacts_dir=artifacts_dir(state, "reference"),
    )
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
    update.update({"status": err.status, "summary": str(err), "_summary": f"failed: {err}"})  # type: ignore[attr-defined]
    return update
