"""Answers a session remembers: an approval answered once (approve or reject) is not asked again in the
session's later attempts when the same question comes at the same site (the same rule, site and diff).

Read from the session's own events (each ``approval_answer`` answers the ``approval_request`` before it),
so the memory is as durable as the events and needs no storage of its own. An ``edit`` answer (the
reviewer's own files) is asked again: the files it carried are not kept in the events.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from agent.service.store import SessionStore

REMEMBERED = ("approve", "reject")


def question_key(question: dict[str, Any]) -> str:
    """What makes two approval questions the same: the rule, the site and the proposed diff."""
    same = {k: question.get(k) for k in ("rule", "site", "diff")}
    return hashlib.sha256(json.dumps(same, sort_keys=True, default=str).encode()).hexdigest()


def answers(store: SessionStore, sid: str) -> dict[str, str]:
    """question key -> the answer (approve/reject) given to it last in this session."""
    out: dict[str, str] = {}
    asked: dict[str, Any] | None = None
    after = 0
    while batch := store.events_after(sid, after):
        for event in batch:
            if event.kind == "approval_request":
                asked = event.data
            elif event.kind == "approval_answer" and asked is not None:
                action = event.data.get("action")
                if action in REMEMBERED:
                    out[question_key(asked)] = str(action)
                asked = None
        after = batch[-1].id
    return out
