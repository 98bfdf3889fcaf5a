"""diagnose: read the failed run's parsed trace and ask the offline policy for a fix."""

from __future__ import annotations

from agent.errors import EnvironmentMissing, Status
from agent.migration.budget import time_left
from agent.migration.environment import environment_failure, rendezvous_failure
from agent.migration.nodes.common import (
    SUMMARY,
    Update,
    check_iteration_budget,
    diagnosis_from_run,
    ensure_workspace,
    fix_context,
    step,
)
from agent.migration.nodes.parity import measure_drift
from agent.migration.runs import RunScheduler
from agent.migration.state import MigrationState, dump, last_phase_of, last_run, options_of, parity_of
from agent.policy import Proposal, Verdict, propose
from agent.policy.base import Diagnosis

TERMINAL_RUN_STATUS: dict[str, Status] = {"timeout": "failed_timeout", "sandbox_error": "failed_sandbox"}


def no_rule_summary(diag: Diagnosis, tried: list[str], llm: bool) -> str:
    what = f"{diag.phase} failed: {diag.kind} at {diag.where()}: {diag.exc_type} {diag.first_line}".strip()
    done = f" Rules already applied: {', '.join(tried)}." if tried else ""
    nxt = (" The model could not fix it either." if llm else
           " No offline rule applies; run again with --llm or fix it by hand.")
    return what + "." + done + nxt


@step("diagnose")
def diagnose(state: MigrationState, runs: RunScheduler) -> Update:
    opts = options_of(state)
    run = last_run(state)
    if run is None:
        raise RuntimeError("diagnose reached without a failed run in the state")
    phase = last_phase_of(state) or "run"
    if run.status in TERMINAL_RUN_STATUS:
        msg = (f"the target {phase} ended with {run.status} after {run.duration_s:.0f}s: "
               f"{(run.error or run.stderr_tail)[-300:]}")
        status = TERMINAL_RUN_STATUS[run.status]
        left = time_left(state)
        if run.status == "timeout" and left is not None and left < opts.run_timeout_s - run.duration_s:
            status = "failed_budget"  # the run's timeout was what the budget had left, not --run-timeout
            msg = (f"wall-time budget: the target {phase} used the last {run.duration_s:.0f}s of --max-wall "
                   f"{opts.max_wall_s:.0f}s and was stopped; run the migration again with a larger --max-wall, "
                   "or make the run shorter")
        return {"status": status, "summary": msg, SUMMARY: msg}
    ws = ensure_workspace(state)
    ctx = fix_context(state, ws)
    diag = diagnosis_from_run(run, phase, ctx.known_files)
    if phase == "test":  # the parity before the tests, with its measured drift, is evidence about them too
        diag = diag.model_copy(update={"parity": parity_of(state)})
    missing = environment_failure(diag, run.stderr_tail + "\n" + run.stdout_tail, ctx.known_files,
                                  opts.python or run.python)
    rendezvous = rendezvous_failure(run, f"the target {phase}")
    if missing is not None or rendezvous is not None:  # no edit of the code mends it, and no model either
        msg = missing.message() if missing is not None else str(rendezvous)
        return {"diagnosis": dump(diag), "proposal": None, "status": EnvironmentMissing.status, "summary": msg,
                SUMMARY: f"{phase} failed: {msg}"}
    check_iteration_budget(state, f"the {phase} still fails")
    update: Update = {}
    if diag.parity is not None and diag.parity.drift_measured is False:
        # the parity passed by the drift budget and its side runs waited for a reason to be made: failing tests
        # are one (the policy's FIX008-after-drift rule reads what they measure)
        measured, drift_runs = measure_drift(state, diag.parity)
        diag = diag.model_copy(update={"parity": measured})
        update.update({"parity": dump(measured), "runs": drift_runs})
    result = propose(diag, ctx)
    update["diagnosis"] = dump(diag)
    if isinstance(result, Proposal):
        update["proposal"] = dump(result)
        update[SUMMARY] = f"{diag.kind} at {diag.where()} -> {result.rule}"
    elif isinstance(result, Verdict):
        update.update({"proposal": None, "status": result.status, "summary": result.summary,
                       SUMMARY: f"{diag.kind} at {diag.where()} -> {result.status} ({result.rule})"})
    else:
        update["proposal"] = None
        if not opts.llm:
            update.update({"status": "needs_llm", "summary": no_rule_summary(diag, ctx.tried, False)})
        asking = "; asking the model" if opts.llm else ""
        update[SUMMARY] = f"{diag.kind} at {diag.where()} -> no offline rule{asking}"
    return update
