"""The model's one profile round (--llm): findings worth a change go to the model, once per migration.

``profile_llm`` shows the model the profile's high-severity findings (``findings_worth_a_change``)
through the fixer loop (``agent.llm.fixer``, phase ``profile``) once the migration is verified.
Its edit is a proposal like any other: ``apply_fix`` -> ``target_run`` -> ``parity`` -> ``tests`` ->
``cpu_check`` -> ``profile``; the routers send any failure on that way to ``profile_revert``, and
``profile_verdict`` judges the end (the same evidence ``migrated`` needs). A change that does not
pass everything is reverted to the last verified state (its files, and the evidence they were
verified with), so the report describes the code it ships; ``ProfileRound`` records what happened.
The round is never asked twice (``profile_round`` is set from its first step), so the graph ends.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agent.errors import FerryAgentError
from agent.migration.budget import has_time_for
from agent.migration.nodes.common import SUMMARY, Update, ensure_workspace, source_of, step
from agent.migration.nodes.llm_fix import model_session
from agent.migration.nodes.report import final_status
from agent.migration.records import Edit, ProfileRound
from agent.migration.runs import RunScheduler
from agent.migration.state import (
    MigrationState,
    dump,
    evidence_of,
    files_of,
    findings_worth_a_change,
    iteration_of,
    last_phase_of,
    last_run,
    options_of,
    parity_of,
    profile_round_of,
    status_of,
    summary_of,
)
from agent.policy.base import Diagnosis, Proposal, UserFrame
from tools.patch import file_diff, read_text
from tools.profile.models import ProfileFinding


def finding_label(f: ProfileFinding) -> str:
    return f"{f.where() or '(no source line)'}  {f.title}"


def profile_evidence(findings: list[ProfileFinding]) -> str:
    """The findings as the model reads them: severity, where, how often, the line, the profiler's hint."""
    lines = ["Profile findings worth a change:"]
    for f in findings:
        lines.append(f"- [{f.severity}, {f.kind}] {finding_label(f)} ({f.count}x)"
                     + (f"\n  source: {f.source.strip()}" if f.source else "") + f"\n  hint: {f.suggestion}")
    return "\n".join(lines)


def _not_made(rnd: ProfileRound, reason: str, usage: dict[str, float] | None = None) -> Update:
    done = rnd.model_copy(update={"phase": "not_made", "reason": reason, "base_files": {}, "base_evidence": {}})
    return {"profile_round": dump(done), "llm_usage": usage or {}, SUMMARY: f"no profile change by the model: {reason}"}


@step("profile_llm")
def profile_llm(state: MigrationState, runs: RunScheduler) -> Update:
    from agent.llm.client import model_client
    from agent.llm.fixer import run_fixer

    opts = options_of(state)
    worth = findings_worth_a_change(state)
    base = dict(files_of(state))
    rnd = ProfileRound(phase="verifying", findings=[finding_label(f) for f in worth], base_files=base,
                       base_evidence=evidence_of(state))
    it = iteration_of(state)
    if it >= opts.max_iterations:
        return _not_made(rnd, f"the iteration budget ({opts.max_iterations} fix rounds) is spent")
    if not has_time_for(state, "target"):
        return _not_made(rnd, "the wall-time budget (--max-wall) leaves no time to verify a change")
    session = model_session(state, runs, "llm-profile", base)
    diag = Diagnosis(phase="profile", kind="profile_findings", message=profile_evidence(worth),
                     frames=[UserFrame(file=f.file, line=f.line) for f in worth if f.file and f.line][-3:])
    try:
        client = model_client(state, "profile_llm")
    except FerryAgentError as exc:
        return _not_made(rnd, f"{exc.status}: {exc}")
    try:
        summary = run_fixer(client, session, diag, [])
    except FerryAgentError as exc:  # the migration is verified already: a model failure here ends nothing
        return _not_made(rnd, f"{exc.status}: {exc}", client.counters())
    diff = "".join(file_diff(rel, base.get(rel, read_text(Path(opts.source) / rel, Path(opts.source))), text)
                   for rel, text in sorted(session.files.items()))
    site = f"profile:{worth[0].where() or worth[0].title}" if worth else "profile"
    proposal = Proposal(rule="llm", kind="llm", reason=f"model (profile findings): {summary}", site=site,
                        files=session.files, diff=diff)
    rnd = rnd.model_copy(update={"summary": summary[:600], "files": sorted(session.files)})
    return {"proposal": dump(proposal), "profile_round": dump(rnd), "llm_usage": client.counters(),
            SUMMARY: f"model proposes a profile change to {', '.join(sorted(session.files))}; verifying it"}


def why_rejected(state: MigrationState) -> str:
    """What failed while the model's change was verified."""
    if status_of(state):
        return f"{status_of(state)}: {summary_of(state) or ''}".strip()
    run = last_run(state)
    if run is not None and not run.ok:
        what = "the tests" if last_phase_of(state) == "test" else "the target run"
        return f"{what} failed: {run.failure_line()[:400]}"
    report = parity_of(state)
    if report is not None and report.failed:
        return f"parity failed: {report.divergence_text()[:400]}"
    return final_status(state)[1]


def revert(state: MigrationState, reason: str) -> Update:
    """Back to the last verified state: the files the change touched and the evidence; a ``revert`` edit
    records it in the patch history."""
    rnd = profile_round_of(state)
    assert rnd is not None
    source = source_of(state)
    current = files_of(state)
    restored: dict[str, str] = {}
    for rel, text in sorted(current.items()):
        before = rnd.base_files.get(rel, read_text(source / rel, source))
        if before is not None and before != text:
            restored[rel] = before
    diff = "".join(file_diff(rel, current[rel], text) for rel, text in restored.items())
    ws = ensure_workspace({**state, "files": {**current, **restored}})
    update: dict[str, Any] = {**rnd.base_evidence, "files": restored, "workspace": str(ws), "proposal": None,
                              "diagnosis": None, "status": None, "summary": None}
    if restored:
        update["edits"] = [dump(Edit(step=f"revert-{iteration_of(state)}", kind="revert", rule="revert",
                                     site="profile", files=sorted(restored), diff=diff,
                                     reason=f"the model's profile change was rejected: {reason}"))]
    done = rnd.model_copy(update={"phase": "rejected", "reason": reason, "base_files": {}, "base_evidence": {}})
    return {**update, "profile_round": dump(done),
            SUMMARY: f"the model's profile change was rejected and reverted: {reason[:300]}"}


@step("profile_revert")
def profile_revert(state: MigrationState, runs: RunScheduler) -> Update:
    return revert(state, why_rejected(state))


@step("profile_verdict")
def profile_verdict(state: MigrationState, runs: RunScheduler) -> Update:
    """The change passed the run, parity and the tests: it is kept when the whole evidence shows a
    migration (device work, the CPU guard), else reverted."""
    status, why = final_status(state)
    if status != "migrated":
        return revert(state, why)
    rnd = profile_round_of(state)
    assert rnd is not None
    left = findings_worth_a_change(state)
    reason = (f"verified: {why}; findings worth a change: {len(rnd.findings)} before, {len(left)} after")
    done = rnd.model_copy(update={"phase": "kept", "reason": reason, "base_files": {}, "base_evidence": {}})
    return {"profile_round": dump(done), SUMMARY: f"the model's profile change is kept ({reason})"}
