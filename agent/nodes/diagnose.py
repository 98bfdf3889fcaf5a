"""diagnose: read the failed run's parsed trace and ask the offline policy for a fix."""

from __future__ import annotations

import logging
from typing import Any

from agent.nodes.common import check_iteration_budget, diagnosis_from_run, ensure_workspace, fix_context, step
from agent.policy import Proposal, Verdict, propose
from agent.state import MigrationState, options_of

logger = logging.getLogger(__name__)

TERMINAL_RUN_STATUS = {"timeout": "failed_timeout", "sandbox_error": "failed_sandbox"}


def no_rule_summary(diag: Any, tried: list[str], llm: bool) -> str:
    first = diag.message.splitlines()[0] if diag.message else ""
    what = f"{diag.phase} failed: {diag.kind} at {diag.where()}: {diag.exc_type} {first}".strip()
    done = f" Rules already applied: {', '.join(tried)}." if tried else ""
    nxt = " The model could not fix it either." if llm else " No offline rule applies; run again with --llm or fix it by hand."
    return what + "." + done + nxt


@step("diagnose")
def diagnose(state: MigrationState) -> dict[str, Any]:
    opts = options_of(state)
    run = state.get("last_run") or {}
    if run.get("status") in TERMINAL_RUN_STATUS:
        status = TERMINAL_RUN_STATUS[run["status"]]
        msg = (f"the target {run.get('phase', 'run')} ended with {run['status']} "
               f"after {run.get('duration_s') or 0:.0f}s: {(run.get('stderr_tail') or '')[-300:]}")
        return {"status": status, "summary": msg, "_summary": msg}
    check_iteration_budget(state, f"the {run.get('phase', 'run')} still fails")
    ws = ensure_workspace(state)
    ctx = fix_context(state, ws)
    diag = diagnosis_from_run(run, run.get("phase", "run"), ctx.known_files)
    result = propose(diag, ctx)
    update: dict[str, Any] = {"diagnosis": diag.model_dump(mode="json")}
    if isinstance(result, Proposal):
        update["proposal"] = result.model_dump(mode="json")
        update["_summary"] = f"{diag.kind} at {diag.where()} -> {result.rule}"
    elif isinstance(result, Verdict):
        update.update({"proposal": None, "status": result.status, "summary": result.summary,
                       "_summary": f"{diag.kind} at {diag.where()} -> {result.status} ({result.rule})"})
    else:
        update["proposal"] = None
        if not opts.llm:
            update.update({"status": "needs_llm", "summary": no_rule_summary(diag, ctx.tried, False)})
        update["_summary"] = f"{diag.kind} at {diag.where()} -> no offline rule" + ("; asking the model" if opts.llm else "")
    return update
