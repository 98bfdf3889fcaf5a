"""apply_fix: apply the proposed edit (after approval when --approve and it is not a codemod)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langgraph.types import interrupt

from agent.errors import BudgetExhausted
from agent.migration.nodes.common import SUMMARY, Update, ensure_workspace, step
from agent.migration.records import Edit, EditKind
from agent.migration.runs import RunScheduler
from agent.migration.state import MigrationState, dump, files_of, iteration_of, options_of
from agent.policy.base import Proposal, proposal_of
from agent.policy.edits import check_parses
from tools.patch import file_diff, read_text


def _decision(proposal: Proposal) -> dict[str, Any]:
    """Pause the graph (LangGraph interrupt) and wait for approve / reject / edit."""
    answer = interrupt({
        "type": "approve_edit",
        "rule": proposal.rule, "kind": proposal.kind, "site": proposal.site,
        "reason": proposal.reason, "diff": proposal.diff,
        "how": "resume with {'action': 'approve'} | {'action': 'reject'} | {'action': 'edit', 'files': {path: text}}",
    })
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
    if opts.approve and kind != "codemod":
        decision = _decision(proposal)
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
        elif action != "approve":
            msg = f"unknown answer {decision!r} to the approval request; expected approve, reject or edit"
            return {"proposal": None, "status": "needs_human", "summary": msg, SUMMARY: msg}
    for rel, text in files.items():
        if rel.endswith(".py"):
            check_parses(text, rel)
    orig_root = Path(opts.source)
    prev = files_of(state)
    diff = "".join(file_diff(rel, prev.get(rel, read_text(orig_root / rel, orig_root)), text) for rel,
                   text in sorted(files.items()))
    ws = ensure_workspace({**state, "files": {**prev, **files}})
    edit = Edit(step=f"fix-{iteration_of(state) + 1}", kind=kind, rule=proposal.rule, site=proposal.site,
                files=sorted(files), diff=diff, reason=proposal.reason,
                dtype_changes=proposal.dtype_changes if kind != "human" else {})
    return {"files": files, "edits": [dump(edit)], "proposal": None, "tried": [key], "workspace": str(ws),
            "iteration": iteration_of(state) + 1, SUMMARY: f"{proposal.rule} at {proposal.site} ({kind})"}
