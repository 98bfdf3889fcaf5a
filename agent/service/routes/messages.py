"""Talking to the agent in a session: the message and the reply stream as events; the reply's action is
carried out here (new options or a retry start a new attempt, an answer resumes the waiting one)."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import APIRouter, HTTPException, status

from agent.chat import intents
from agent.errors import LLMFailure
from agent.llm.config import configured as llm_configured
from agent.migration.facade import MigrationSnapshot, UnknownMigration, load
from agent.policy.catalogue import known_rules
from agent.redact import shipped_docs
from agent.service.deps import SessionDep, SettingsDep, StoreDep
from agent.service.schemas import ErrorDetail, Message, MessageReply, SessionState
from agent.service.settings import ServiceSettings
from agent.service.shown import session_paths
from agent.service.store import QueueFull, SessionRow, SessionStore

logger = logging.getLogger(__name__)

router = APIRouter(prefix="/v1/sessions", tags=["chat"])
RESTARTABLE: tuple[SessionState, ...] = ("finished", "failed")


def facts_of(row: SessionRow, settings: ServiceSettings) -> intents.SessionFacts:
    try:
        state = load(row.migration_id, settings.data_dir)
    except UnknownMigration:
        state = MigrationSnapshot()
    o = row.options
    scan = state.scan
    return intents.SessionFacts(state=row.state, status=row.status, summary=row.summary, run=o.run, test=o.test,
                             device=o.device, skip_rules=list(o.skip_rules), edits=state.edits,
                             interrupts=[q.data() for q in state.interrupts], rules=known_rules(),
                             findings=scan.findings if scan else [])


def _new_attempt(store: SessionStore, settings: ServiceSettings, row: SessionRow, why: str, **options: Any) -> str:
    opts = row.options.model_copy(update=options)
    if row.state == "queued":  # not started yet: it starts with these options
        store.update(row.id, options=opts)
        return "The session has not started yet: it will start with this."
    if row.state in RESTARTABLE:
        try:
            queued = store.requeue(row.id, expect=RESTARTABLE, queue_limit=settings.queue, options=opts,
                                   attempt=row.attempt + 1, status=None, summary=None, error=None, step=None,
                                   event=("attempt", {"attempt": row.attempt + 1, "why": why}))
        except QueueFull as exc:
            return f"Not now: {exc} (the server's queue is full); ask again in a while."
        if queued:
            return f"Attempt {row.attempt + 1} is queued with this."
        return "The session changed meanwhile (another message or a cancel came first); nothing was started."
    store.update(row.id, options=opts)
    return f"The session is {row.state.replace('_', ' ')}: this applies to its next attempt (say 'try again' " \
           "once it has ended)."


def _act(store: SessionStore, settings: ServiceSettings, row: SessionRow, action: intents.Action) -> str:
    """Carry out the reply's action; what happened, for the reply's text."""
    if isinstance(action, intents.Decide):
        if row.state != "waiting_for_approval":
            return "There is nothing waiting for approval now."
        answered: tuple[str, dict[str, Any]] = ("approval_answer", {"action": action.action, "files": []})
        if not store.requeue(row.id, expect=("waiting_for_approval",), answer={"action": action.action},
                             event=answered):
            return "Another answer came first (or the session was cancelled): nothing was changed."
        return f"{action.action.capitalize()}d: the migration goes on."
    if row.state == "cancelled":
        return "This session was cancelled and its files removed: start a new session."
    if isinstance(action, intents.SetOptions):
        changes = {k: v for k, v in {"run": action.run, "test": action.test, "device": action.device}.items()
                   if v is not None}
        return _new_attempt(store, settings, row, "options changed: " + ", ".join(sorted(changes)), **changes)
    if isinstance(action, intents.SkipRules):
        rules = sorted({*row.options.skip_rules, *action.rules})
        return _new_attempt(store, settings, row, "rules skipped: " + ", ".join(action.rules), skip_rules=rules)
    if row.state not in RESTARTABLE:
        return f"The session is {row.state.replace('_', ' ')}; a retry starts once it has ended."
    return _new_attempt(store, settings, row, "retry")


def _answer(text: str, facts: intents.SessionFacts, row: SessionRow) -> intents.Reply:
    """The model's answer when the server has one configured (FERRY_LLM_*), else the offline intents'."""
    if not llm_configured():
        return intents.reply(text, facts)
    from agent.chat.model_replies import model_reply
    from agent.llm.client import ChatClient
    from agent.llm.config import from_env, resolve_limits

    try:
        client = ChatClient(from_env(limits=resolve_limits({})))
    except (LLMFailure, ValueError) as exc:
        logger.warning("session %s: the model is not usable for chat: %s", row.id, exc)
        offline = intents.reply(text, facts)
        return offline.model_copy(update={"text": f"{offline.text}\n\n(The model could not be used: {exc}.)"})
    return model_reply(text, facts, client)


@router.post("/{sid}/messages", status_code=status.HTTP_202_ACCEPTED, response_model=MessageReply,
             responses={404: {"model": ErrorDetail, "description": "no such session of yours"}})
def post_message(body: Message, row: SessionDep, settings: SettingsDep, store: StoreDep) -> MessageReply:
    """Say something to the agent: ask why an edit was made, skip or revert a rule, change the run or test
    command or the device, retry, approve or reject. The reply also streams as a `reply` event."""
    facts = facts_of(row, settings)
    store.add_event(row.id, "message", {"text": body.text})
    reply = _answer(body.text, facts, row)
    text = reply.text
    if reply.action is not None:
        current = store.get(row.id)
        if current is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"session {row.id} was deleted")
        text = f"{text}\n\n{_act(store, settings, current, reply.action)}"
    text = shipped_docs(session_paths(settings, row.id, row.attempt)(text))  # no server path, no design doc
    action = reply.action.model_dump() if reply.action is not None else None
    eid = store.add_event(row.id, "reply", {"text": text, "intent": reply.intent, "action": action})
    return MessageReply(event_id=eid, text=text, intent=reply.intent, action=action)
