"""llm_fix: when no offline rule applies and --llm is on, ask the model for an edit.

Reached from ``diagnose`` (a run or test failure), from ``parity`` (the program runs but its
numbers differ) and from ``cpu_check`` (the CPU guard rejected and reverted the model's last edit:
the diagnosis, phase ``cpu_check``, carries the guard's finding, the rejected diff and the failure
that edit was meant to fix); the model's edits become a proposal that ``apply_fix`` applies and the
graph re-verifies (target_run, parity, tests, the CPU guard), so an edit that does not fix it comes
back here within the iteration and LLM budgets.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from agent.errors import FerryAgentError
from agent.migration import adapters
from agent.migration.budget import Clock, ensure_time_for
from agent.migration.nodes.common import SUMMARY, Update, artifacts_dir, ensure_workspace, source_of, step
from agent.migration.records import CostQuestion
from agent.migration.runs import RunScheduler
from agent.migration.state import (
    MigrationState,
    dump,
    edits_of,
    files_of,
    iteration_of,
    options_of,
    parity_of,
    reference_of,
    tried_of,
)
from agent.policy.base import Diagnosis, FixContext, Proposal, diagnosis_of
from agent.policy.engine import skipped_verdict
from agent.policy.skipped import skipped_sites
from tools.patch import file_diff, read_text
from tools.runner.models import RunResult

if TYPE_CHECKING:
    from agent.llm.functions import EditSession

logger = logging.getLogger(__name__)


def model_session(state: MigrationState, runs: RunScheduler, label: str, base: dict[str, str]) -> EditSession:
    """The model's tools over the workspace (edits on top of ``base``); its runs go to tpx, each with its
    artefacts under ``<label>-N``, within what the wall-time budget has left."""
    from agent.llm.functions import EditSession

    opts = options_of(state)
    clock = Clock.of(state)
    ws = ensure_workspace(state)
    counter = {"n": 0}

    def runner(path: Path, command: str, probe: bool, profile: bool) -> RunResult:
        counter["n"] += 1
        return adapters.run(path, command, device="tpx", redirect_cuda=None, probe=probe, profile=profile,
                           timeout_s=clock.timeout(), seed=opts.seed,
                           artifacts_dir=artifacts_dir(state, f"{label}-{counter['n']}"),
                           disk_limit_bytes=opts.disk_limit_bytes)

    ref = reference_of(state)
    return EditSession(source_of(state), ws, base, runner,
                       str(ref.probe_dir) if ref is not None and ref.probe_dir else None,
                       opts.run_command, opts.test_command, runs)


def diagnosis_for_model(state: MigrationState) -> Diagnosis:
    """The stored diagnosis, with the parity report (parity failures) and the edits made so far."""
    stored = diagnosis_of(state)
    diag = stored if stored is not None else Diagnosis(phase="run", kind="other")
    earlier = [f"{e.rule} at {e.site} ({e.kind}): {e.reason}" for e in edits_of(state) if e.kind != "codemod"]
    if diag.phase == "cpu_check":
        # the rejected edit's failure, with its own parity report (kept with it: the state's is the
        # report of the rejected edit's run)
        return diag.model_copy(update={"earlier_edits": earlier})
    return diag.model_copy(update={"parity": parity_of(state) if diag.phase == "parity" else None,
                                   "earlier_edits": earlier})


@step("llm_fix")
def llm_fix(state: MigrationState, runs: RunScheduler) -> Update:
    from agent.llm.client import model_client
    from agent.llm.cost import CostCapReached
    from agent.llm.fixer import run_fixer

    opts = options_of(state)
    ensure_time_for(state, "target", "the model's fix (it runs the program to check its edits)")
    client = model_client(state, "llm_fix")
    it = iteration_of(state)
    session = model_session(state, runs, f"llm-{it}", files_of(state))
    diag = diagnosis_for_model(state)
    try:
        summary = run_fixer(client, session, diag, tried_of(state))
    except CostCapReached as exc:
        spent = f"; ${exc.spent_usd:.4f} spent on the model"
        if opts.approve:  # the user is asked whether to allow more (approve_cost), then the fix starts again
            question = CostQuestion(spent_usd=round(exc.spent_usd, 6), cap_usd=exc.cap_usd,
                                    next_worst_usd=round(exc.next_worst_usd, 6), reason=str(exc))
            return {"llm_usage": client.counters(), "cost_question": dump(question),
                    SUMMARY: f"model: cost cap reached{spent}; asking whether to allow more"}
        return {"llm_usage": client.counters(), "status": exc.status, "summary": f"LLM fix: {exc}",
                SUMMARY: f"model: {exc.status}: {exc}"}
    except FerryAgentError as exc:
        return {"llm_usage": client.counters(), "status": exc.status, "summary": f"LLM fix: {exc}",
                SUMMARY: f"model: {exc.status}: {exc}"}
    except Exception as exc:  # a Ferry bug: still keep what the model used
        logger.exception("llm_fix failed unexpectedly")
        return {"llm_usage": client.counters(), "status": "failed_internal",
                "summary": f"llm_fix: {type(exc).__name__}: {exc}",
                SUMMARY: f"internal error: {type(exc).__name__}: {exc}"}
    base = files_of(state)
    diff = "".join(file_diff(rel, base.get(rel, read_text(Path(opts.source) / rel, Path(opts.source))), text)
                   for rel, text in sorted(session.files.items()))
    fixing = diag.previous if diag.phase == "cpu_check" and diag.previous is not None else diag
    site = fixing.where()
    if fixing.phase == "parity":
        report = fixing.parity or parity_of(state)
        div = report.first_divergence if report is not None else None
        site = f"parity:{div.key if div is not None else 'unlocalised'}"
    proposal = Proposal(rule="llm", kind="llm", reason=f"model: {summary}", site=site, files=session.files, diff=diff)
    if opts.skip_rules:  # the model may not make the change of a rule the user asked to skip either
        ctx = FixContext(source=Path(opts.source), files=dict(base), skip_rules=list(opts.skip_rules))
        if blocked := skipped_sites(proposal, ctx):
            msg = skipped_verdict(fixing, blocked).summary
            return {"llm_usage": client.counters(), "proposal": None, "status": "needs_human", "summary": msg,
                    SUMMARY: f"model's edit not made: {msg}"}
    before = {rel: text for rel in session.files
              if (text := base.get(rel, read_text(Path(opts.source) / rel, Path(opts.source)))) is not None}
    update: Update = {}
    if diag.phase == "parity":  # kept with its report: the CPU guard may send this failure back to the model
        update["diagnosis"] = diag.model_dump(mode="json", exclude={"earlier_edits"})
    return {**update, "proposal": dump(proposal), "llm_usage": client.counters(), "llm_before": before,
            SUMMARY: f"model proposes edits to {', '.join(sorted(session.files))} ({client.usage.calls} calls)"}
