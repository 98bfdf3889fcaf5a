"""The model's fix loop: show it the failure, let it use the tools, collect its edits as a proposal."""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from agent.errors import FixableError, LLMFailure, NeedsHuman
from agent.knowledge import prompt_section
from agent.llm.client import ChatClient
from agent.llm.evidence import parity_evidence, test_evidence
from agent.llm.functions import EditSession, tool_schemas
from agent.llm.prompts import FIXER_SYSTEM, GUARD_TASK, PARITY_TASK, PROFILE_TASK
from agent.policy.base import Diagnosis

logger = logging.getLogger(__name__)

def _text_or_none(session: EditSession, rel: str) -> str | None:
    try:
        return session.text(rel)
    except FixableError:
        return None


def _parity_context(session: EditSession, diag: Diagnosis) -> list[str]:
    parts = [PARITY_TASK, f"Phase: parity ({diag.message})"]
    if diag.parity is not None:
        parts.append(parity_evidence(diag.parity, session.known, lambda rel: _text_or_none(session, rel),
                                     session.migration_diff))
    return parts


def _guard_context(diag: Diagnosis) -> list[str]:
    parts = [GUARD_TASK, f"The CPU guard's finding: {diag.message[:1500]}"]
    if diag.frames:
        where = " -> ".join(f"{f.file}:{f.line} ({f.function})" for f in diag.frames)
        parts.append(f"Where the CPU run failed: {where}")
    if diag.rejected_diff:
        parts.append(f"The rejected edit (reverted):\n{diag.rejected_diff[:4000]}")
    parts.append("The failure that edit was meant to fix:")
    return parts


def _failure_parts(session: EditSession, diag: Diagnosis) -> list[str]:
    if diag.phase == "parity":
        return _parity_context(session, diag)
    if diag.phase == "profile":  # diag.message lists the findings; their sites are diag.frames
        return [PROFILE_TASK, f"Phase: profile\n{diag.message}"]
    parts = [f"Phase: {diag.phase}", f"Signature: {diag.kind}" + (f" (op {diag.op})" if diag.op else ""),
             f"Exception: {diag.exc_type}: {diag.message[:1500]}"]
    tests = test_evidence(diag.tests)
    if tests:
        parts.append(tests)
    return parts


def _context(session: EditSession, diag: Diagnosis, tried: list[str], window: int = 12) -> str:
    if diag.phase == "cpu_check":
        failure = diag.previous or Diagnosis(phase="run", kind="other")
        parts = _guard_context(diag) + _failure_parts(session, failure)
        frames = failure.frames
    else:
        parts, frames = _failure_parts(session, diag), diag.frames
    for fr in frames[-3:]:
        lines = (_text_or_none(session, fr.file) or "").splitlines()
        if not lines:
            continue
        lo, hi = max(1, fr.line - window), min(len(lines), fr.line + window)
        code = "\n".join(f"{'>' if i == fr.line else ' '}{i}: {lines[i - 1]}" for i in range(lo, hi + 1))
        parts.append(f"--- {fr.file} around line {fr.line} ({fr.function}) ---\n{code}")
    rules = [t for t in tried if not t.startswith("llm@")]  # the model's own edits are listed below
    parts.append("Offline rules already applied: " + (", ".join(rules) if rules else "none"))
    knowledge = prompt_section(diag.previous if diag.phase == "cpu_check" and diag.previous else diag)
    if knowledge:
        parts.append(knowledge)
    earlier = diag.earlier_edits
    if earlier:
        parts.append("Edits already applied in this migration (re-verified; the failure above is what remains):\n"
                     + "\n".join(f"- {e}" for e in earlier))
    parts.append(f"Repository files: {', '.join(session.known[:60])}")
    return "\n\n".join(parts)


def _message_dict(msg: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"role": "assistant", "content": msg.content or ""}
    if getattr(msg, "tool_calls", None):
        out["tool_calls"] = [{"id": tc.id, "type": "function",
                              "function": {"name": tc.function.name, "arguments": tc.function.arguments or ""}}
                             for tc in msg.tool_calls]
    return out


def run_fixer(client: ChatClient, session: EditSession, diag: Diagnosis, tried: list[str]) -> str:
    """Drive the model until it finishes; returns its summary. Edits are in ``session.files``."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": FIXER_SYSTEM},
                                      {"role": "user", "content": _context(session, diag, tried)}]
    tools = tool_schemas()
    malformed = 0
    for _turn in range(client.cfg.max_turns):
        msg = client.chat(messages, tools)
        n = client.last_request
        messages.append(_message_dict(msg))
        calls = getattr(msg, "tool_calls", None) or []
        if not calls:
            if session.files:
                return msg.content or "edits made"
            malformed += 1
            if malformed > client.cfg.max_malformed:
                raise NeedsHuman(f"the model stopped without an edit: {(msg.content or '')[:400]}")
            messages.append({"role": "user",
                             "content": "Use the tools: make an edit with apply_edit or apply_diff, then call finish."})
            continue
        for tc in calls:
            name = tc.function.name
            t0 = time.monotonic()
            try:
                result = session.call(name, tc.function.arguments)
            except FixableError as exc:
                malformed += 1
                client.count_failure("tool_call")
                logger.info("tool call %s rejected: %s", name, exc)
                if malformed > client.cfg.max_malformed:
                    raise LLMFailure(f"LLM tool_call: the model made {malformed} malformed or rejected tool calls; "
                                     f"last: {exc}") from exc
                result = json.dumps({"error": str(exc)})
            client.record_tool(n, tc.id, name, tc.function.arguments or "", result, time.monotonic() - t0)
            messages.append({"role": "tool", "tool_call_id": tc.id, "content": result})
            if session.finished is not None:
                if not session.files:
                    raise NeedsHuman(f"the model finished without an edit: {session.finished[:400]}")
                return session.finished
    raise NeedsHuman(f"the model used its {client.cfg.max_turns} turns without finishing")
