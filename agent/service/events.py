"""A session's events, derived from the migration's checkpointed state.

Every event the graph's progress produces has a key made from its place in the state (the N-th step,
edit, run of attempt A; the approval question asked after step N). The worker records them as the
graph streams them, and again from the whole saved state when an attempt ends or a restarted server
picks a session up: what was recorded is skipped, what a kill -9 lost between the checkpoint and the
event write is added. Nothing is lost, nothing duplicated.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from agent.migration.facade import INTERRUPT, ApprovalRequest, MigrationSnapshot, NodeUpdate
from agent.migration.records import Edit, RunRecord, Step

Event = tuple[str, str | None, dict[str, Any]]  # kind, key (None: not derived from the state), data


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


# The keys: the N-th step, edit or run of attempt A, whichever way the event was made (streamed or from the state).
def step_event(attempt: int, n: int, step: Step) -> Event:
    return "step", f"a{attempt}:step:{n}", step.model_dump()


def edit_event(attempt: int, n: int, edit: Edit) -> Event:
    return "edit", f"a{attempt}:edit:{n}", {**edit.model_dump(), "by": edit.by}


def run_event(attempt: int, n: int, run: RunRecord) -> Event:
    return "run", f"a{attempt}:run:{n}", run.model_dump()


def approval_event(attempt: int, steps: int, request: ApprovalRequest) -> Event:
    question = request.data()
    data = {k: question.get(k) for k in ("rule", "site", "reason", "diff", "files", "kind", "question")
            if question.get(k) is not None}
    return "approval_request", f"a{attempt}:approval:{steps}:{_digest(question)}", data


def from_state(attempt: int, state: MigrationSnapshot) -> list[Event]:
    """Every event the saved state of this attempt accounts for, in the order they happened."""
    steps = state.steps
    out = [step_event(attempt, i, step) for i, step in enumerate(steps)]
    out += [edit_event(attempt, i, edit) for i, edit in enumerate(state.edits)]
    out += [run_event(attempt, i, run) for i, run in enumerate(state.runs)]
    out += [approval_event(attempt, len(steps), question) for question in state.interrupts]
    if state.status is not None:
        out.append(("status", f"a{attempt}:status", {"status": state.status, "summary": state.summary}))
    return out


class SessionProgress:
    """Turns the graph's streamed updates into keyed events, numbering from the state the attempt began with."""

    def __init__(self, attempt: int, begun_with: MigrationSnapshot | None) -> None:
        self.attempt = attempt
        self.steps = len(begun_with.steps) if begun_with is not None else 0
        self.edits = len(begun_with.edits) if begun_with is not None else 0
        self.runs = len(begun_with.runs) if begun_with is not None else 0
        self.node: str | None = None

    def events(self, node: str, update: NodeUpdate) -> list[Event]:
        a = self.attempt
        if node == INTERRUPT:
            return [approval_event(a, self.steps, q) for q in update.interrupts]
        self.node = node
        out: list[Event] = []
        for edit in update.edits:
            out.append(edit_event(a, self.edits, edit))
            self.edits += 1
        for run in update.runs:
            out.append(run_event(a, self.runs, run))
            self.runs += 1
        for step in update.steps:
            out.append(step_event(a, self.steps, step))
            self.steps += 1
        return out


def sse(event_id: int, kind: str, data: dict[str, Any]) -> str:
    """One Server-Sent Event (data is one line of JSON: no newline can split it)."""
    return f"id: {event_id}\nevent: {kind}\ndata: {json.dumps(data, default=str)}\n\n"
