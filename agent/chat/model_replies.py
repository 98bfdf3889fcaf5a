"""The chat of a migration session with a model: one chat call with the session's facts, the
actions offered as tools (their schemas derived from the :data:`agent.chat.intents.Action` models).

The call and its instructions are :mod:`agent.llm`'s (``answers.chat_answer``, ``prompts.CHAT_SYSTEM``).
The model's text is the reply; a tool call becomes the action, validated like any other input (an
invalid one, or one the session's state does not allow, is dropped with a note in the text). When
the model server fails (``LLMFailure``, ``BudgetExhausted``), the offline :func:`chat.reply`
answers, with a note that the model failed.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from pydantic import BaseModel, TypeAdapter, ValidationError

from agent.chat.intents import Action, Decide, Intent, Reply, Retry, SessionFacts, SetOptions, SkipRules, reply
from agent.chat.named_rules import applied_rules
from agent.errors import BudgetExhausted, LLMFailure
from agent.llm.answers import chat_answer
from agent.llm.client import ChatClient
from agent.llm.functions import tool_schema
from agent.redact import shipped_docs

logger = logging.getLogger(__name__)

#: the tools offered to the model: tool name -> the action model (its ``kind`` is the tool's name)
ACTION_TOOLS: dict[str, type[BaseModel]] = {
    "set_options": SetOptions, "retry": Retry, "skip_rules": SkipRules, "decide": Decide}
_ACTION: TypeAdapter[Action] = TypeAdapter(Action)
MAX_DIFF_CHARS = 2000


def action_tools() -> list[dict[str, Any]]:
    """The OpenAI tool definitions of the actions (``kind`` is the tool's name, not asked of the model)."""
    return [tool_schema(name, model, omit=("kind",)) for name, model in ACTION_TOOLS.items()]


def facts_text(facts: SessionFacts) -> str:
    """The session's facts as the model reads them: state, options, summary, the edits with their reasons."""
    lines = [f"state: {facts.state}", f"status: {facts.status or '(not finished)'}",
             f"summary: {facts.summary or '(none)'}", f"run command: {facts.run}",
             f"test command: {facts.test or '(none)'}", f"device: {facts.device}",
             f"skipped by request: {', '.join(facts.skip_rules) or '(none)'}"]
    for q in facts.interrupts:
        lines.append(f"pending approval: {json.dumps(q, default=str)[:1000]}")
    lines.append(f"edits ({len(facts.edits)}):")
    for e in facts.edits:
        diff = e.diff if len(e.diff) <= MAX_DIFF_CHARS else e.diff[:MAX_DIFF_CHARS] + "\n... (cut)"
        lines += [f"- {e.step}: by {e.by} (rule {e.rule}, {e.kind}) files {', '.join(e.files)}"
                  + (f" at {e.site}" if e.site else "") + f"; reason: {shipped_docs(e.reason)}", diff]
    applied = applied_rules(facts.edits)
    sites = [f"{f.rule} at {f.file}:{f.line}" for f in facts.findings if f.rule in applied][:200]
    if sites:
        lines.append("where the applied catalogue rules matched the original code: " + ", ".join(sites))
    known = [f"{r}: {facts.rules[r][:200]}" for r in applied if r in facts.rules]
    if known:
        lines += ["rules applied:", *known]
    lines.append(f"all known rule ids: {', '.join(facts.rules)}")
    return "\n".join(lines)


def model_reply(text: str, facts: SessionFacts, client: ChatClient) -> Reply:
    """The model's answer to the user's message (the offline :func:`reply` when the model fails)."""
    try:
        answer = chat_answer(client, facts_text(facts), text, action_tools())
    except (LLMFailure, BudgetExhausted) as exc:
        logger.warning("chat: the model failed (%s); answering offline", exc)
        offline = reply(text, facts)
        return offline.model_copy(update={"text": f"_The model failed ({exc}); answered without it._\n\n"
                                                  + offline.text})
    notes: list[str] = []
    action: Action | None = None
    for call in answer.tool_calls or []:
        name = call.function.name
        if action is not None:
            notes.append(f"the model asked for a second action ({name}); one per message, it was dropped")
            continue
        if name not in ACTION_TOOLS:
            notes.append(f"the model called an unknown tool {name!r}; dropped")
            continue
        try:
            args = json.loads(call.function.arguments or "{}")
            candidate = _ACTION.validate_python({**(args if isinstance(args, dict) else {}), "kind": name})
        except (json.JSONDecodeError, ValidationError) as exc:
            problem = exc.msg if isinstance(exc, json.JSONDecodeError) else "; ".join(
                f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors(include_url=False))
            notes.append(f"the model's {name} call was invalid ({problem}); dropped")
            continue
        refused = not_allowed(candidate, facts)
        if refused:
            notes.append(f"the model's {name} call was dropped: {refused}")
            continue
        action = candidate
    body = (answer.content or "").strip() or (_describe(action) if action else "")
    if notes:
        body = (body + "\n\n" if body else "") + "\n".join(f"_Note: {n}._" for n in notes)
    if not body:
        body = "The model gave no answer."
    return Reply(text=body, intent=_intent(action, text, facts), action=action)


def not_allowed(action: Action, facts: SessionFacts) -> str | None:
    """Why ``action`` makes no sense in the session's state (None: it does)."""
    if isinstance(action, Decide) and facts.state != "waiting_for_approval":
        return f"there is nothing to {action.action}: the session is {facts.state}"
    if isinstance(action, Retry) and facts.state in ("queued", "running", "waiting_for_approval"):
        return f"the session is {facts.state.replace('_', ' ')}; there is nothing to retry"
    if isinstance(action, SkipRules):
        unknown = [r for r in action.rules if facts.rules and r not in facts.rules]
        if unknown:
            return f"unknown rule id(s) {', '.join(unknown)}"
    if isinstance(action, SetOptions) and action.run is None and action.test is None and action.device is None:
        return "it changed nothing"
    if facts.state == "cancelled":
        return "the session was cancelled"
    return None


def _describe(action: Action) -> str:
    if isinstance(action, SetOptions):
        parts = [f"{k} = `{v}`" for k, v in (("run", action.run), ("test", action.test), ("device", action.device))
                 if v is not None]
        return "Setting " + ", ".join(parts) + "."
    if isinstance(action, SkipRules):
        return f"Leaving out {', '.join(action.rules)}; the migration runs again without them."
    if isinstance(action, Decide):
        return f"{'Approved' if action.action == 'approve' else 'Rejected'}."
    return "Running the migration again."


def _intent(action: Action | None, text: str, facts: SessionFacts) -> Intent:
    if isinstance(action, SetOptions):
        return "set_run" if action.run else "set_test" if action.test else "set_device"
    if isinstance(action, SkipRules):
        return "revert_rule" if set(action.rules) & set(applied_rules(facts.edits)) else "skip_rule"
    if isinstance(action, Decide):
        return action.action
    if isinstance(action, Retry):
        return "retry"
    guess = reply(text, facts)  # an answer only: what the offline reading calls it
    return guess.intent if guess.action is None and guess.intent != "unknown" else "explain"
