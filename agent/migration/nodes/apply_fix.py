"""apply_fix: apply the proposed edit (after approval when --approve and it is not a codemod).

Every edit is read by the test guard first (``agent.migration.nodes.guard``, docs/guard.md): one that
weakens the tests ends the migration ``guard_refused``; under --approve the approval request carries the
guard's findings, and approving the edit accepts them (recorded, and said in the report)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langgraph.types import interrupt

from agent.errors import BudgetExhausted
from agent.migration.nodes.common import SUMMARY, Update, ensure_workspace, step
from agent.migration.nodes.guard import event, refused, static_check
from agent.migration.records import Edit, EditKind, edit_by
from agent.migration.runs import RunScheduler
from agent.migration.state import MigrationState, dump, files_of, iteration_of, options_of
from agent.policy.base import Proposal, proposal_of
from agent.policy.edits import check_parses
from tools.guard.models import GuardFinding
from tools.patch import file_diff, read_text


def _decision(proposal: Proposal, findings: list[GuardFinding]) -> dict[str, Any]:
    """Pause the graph (LangGraph interrupt) and wait for approve / reject / edit; the test guard's findings
    on the edit ride along (approving the edit accepts them)."""
    question: dict[str, Any] = {
        "type": "approve_edit",
        "rule": proposal.rule, "kind": proposal.kind, "site": proposal.site,
        "reason": proposal.reason, "diff": proposal.diff,
        "how": "resume with {'action': 'approve'} | {'action': 'reject'} | {'action': 'edit', 'files': {path: text}}",
    }
    if findings:
        question["reason"] = ("the test guard refuses this edit unless you approve it: "
                              + "; ".join(f.describe() for f in findings) + f" (the edit: {proposal.reason})")
        question["guard"] = [f.model_dump(mode="json") for f in findings]
    answer = interrupt(question)
    if isinstance(answer, str):
        answer = {"action": answer}
    return dict(answer or {})


@step("apply_fix")
def apply_fix(state: MigrationState, runs: RunScheduler) -> Update:
    opts = options_of(state)
    proposal = proposal_of(state)
    if proposal is None:
        return {SUMMARY: "nothing to apply"}
    if iteration_of(state) >= opts.max_iterations:
        raise BudgetExhausted(f"iteration budget exhausted ({opts.max_iterations} fix rounds)")
    files: dict[str, str] = dict(proposal.files)
    kind: EditKind = proposal.kind
    key = proposal.key
    step_name = f"fix-{iteration_of(state) + 1}"
    found = static_check(state, files)
    accepted = []
    if found.findings and not (opts.approve and kind != "codemod"):
        return {**refused(found.findings, step_name, f"the edit {key} (by {edit_by(kind, proposal.rule)})"),
                "proposal": None, "tried": [key]}
    if opts.approve and kind != "codemod":
        decision = _decision(proposal, found.findings)
        action = decision.get("action", "")
        if action == "reject":
            msg = f"the edit {key} was rejected by the reviewer ({proposal.reason})"
            return {"proposal": None, "tried": [key], "status": "rejected", "summary": msg, SUMMARY: msg}
        if action == "edit":
            files = {str(k): str(v) for k, v in (decision.get("files") or {}).items()}
            if not files:
                msg = "an 'edit' answer must carry {'files': {path: new text}}"
                return {"proposal": None, "tried": [key], "status": "needs_human", "summary": msg, SUMMARY: msg}
            kind = "human"
            found = static_check(state, files)  # the person's own text: approved as written
        elif action != "approve":
            msg = f"unknown answer {decision!r} to the approval request; expected approve, reject or edit"
            return {"proposal": None, "status": "needs_human", "summary": msg, SUMMARY: msg}
        accepted = found.findings
    for rel, text in files.items():
        if rel.endswith(".py"):
            check_parses(text, rel)
    orig_root = Path(opts.source)
    prev = files_of(state)
    diff = "".join(file_diff(rel, prev.get(rel, read_text(orig_root / rel, orig_root)), text) for rel,
                   text in sorted(files.items()))
    ws = ensure_workspace({**state, "files": {**prev, **files}})
    edit = Edit(step=step_name, kind=kind, rule=proposal.rule, site=proposal.site,
                files=sorted(files), diff=diff, reason=proposal.reason,
                dtype_changes=proposal.dtype_changes if kind != "human" else {})
    guard = [event(f, "accepted", step_name) for f in accepted] + [event(n, "exception", step_name)
                                                                    for n in found.notes]
    said = f"; the test guard's {', '.join(f.key for f in accepted)} accepted by approval" if accepted else ""
    return {"files": files, "edits": [dump(edit)], "proposal": None, "tried": [key], "workspace": str(ws),
            "iteration": iteration_of(state) + 1, "guard": guard,
            SUMMARY: f"{proposal.rule} at {proposal.site} ({kind}){said}"}
