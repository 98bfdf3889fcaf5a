"""parity: compare the reference run's probe dump with the target run's; a failure goes to the policy,
then (under --llm, when no rule applies) to the model, else the migration ends ``partial``."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from agent import toolbox
from agent.nodes.common import check_iteration_budget, ensure_workspace, fix_context, step
from agent.policy import Proposal, Verdict, propose
from agent.policy.base import Diagnosis
from agent.routers import parity_passed
from agent.state import MigrationState, options_of

logger = logging.getLogger(__name__)

__all__ = ["first_divergence", "parity", "parity_passed"]


def first_divergence(report: dict[str, Any]) -> str:
    fd = report.get("first_divergent") or report.get("first_divergence") or report.get("first_divergent_module")
    if isinstance(fd, dict):
        name = fd.get("name") or fd.get("key") or fd.get("module")
        cause = fd.get("likely_cause") or fd.get("op_class") or fd.get("cause") or ""
        return f"{name}" + (f" (likely {cause})" if cause else "")
    return str(fd) if fd else "no module localised"


@step("parity")
def parity(state: MigrationState) -> dict[str, Any]:
    ref = state.get("reference") or {}
    tgt = state.get("target_ok") or {}
    ref_dir, tgt_dir = ref.get("probe_dir"), tgt.get("probe_dir")
    if not ref_dir or not tgt_dir or not Path(ref_dir).is_dir() or not Path(tgt_dir).is_dir():
        msg = (f"no probe dump to compare (reference: {ref_dir or 'none'}, target: {tgt_dir or 'none'}); "
               "parity cannot be proven")
        return {"status": "partial", "summary": msg, "_summary": msg}
    report = toolbox.compare(Path(ref_dir), Path(tgt_dir))
    update: dict[str, Any] = {"parity": report}
    if parity_passed(report):
        update["_summary"] = "parity passes"
        return update
    ws = ensure_workspace(state)
    ctx = fix_context(state, ws)
    diag = Diagnosis(phase="parity", kind="parity_failed", message=f"parity failed; first divergence: {first_divergence(report)}",
                     details={"parity": report})
    result = propose(diag, ctx)
    update["diagnosis"] = diag.model_dump(mode="json", exclude={"details"})
    if isinstance(result, Proposal):
        update["proposal"] = result.model_dump(mode="json")
        update["_summary"] = f"parity fails ({first_divergence(report)}) -> {result.rule}"
        return update
    if isinstance(result, Verdict):
        update.update({"status": result.status, "summary": result.summary, "_summary": result.summary})
        return update
    update["proposal"] = None
    tried = ", ".join(ctx.tried) or "none"
    opts = options_of(state)
    if opts.llm:
        check_iteration_budget(state, f"parity still fails (first divergence {first_divergence(report)}; "
                                      f"edits tried: {tried})")
        update["_summary"] = f"parity fails ({first_divergence(report)}); no offline rule, asking the model"
        return update
    msg = (f"the migrated code runs on tpx but parity fails: first divergence {first_divergence(report)}; "
           f"rules already applied: {tried}. Numeric drift needs a person (or --llm) to judge.")
    update.update({"status": "partial", "summary": msg, "_summary": "parity fails; no rule left"})
    return update
