"""What a review comment asks, read by the chat: offline its intents (skip or revert a rule, change the
run or test command, retry, explain), with a model configured (``FERRY_LLM_*``) the model, given the
comment's whole thread and the change at its line."""

from __future__ import annotations

import logging

from agent.chat import intents
from agent.errors import LLMFailure
from agent.migration.records import Edit, ReviewItem
from agent.policy.catalogue import known_rules
from agent.prbot.github.models import ReviewComment
from agent.prbot.review.site import FerrySite

logger = logging.getLogger(__name__)
PREFIX = "/ferry"


def instruction(body: str) -> tuple[str, bool]:
    """The comment's instruction and whether it is a ``/ferry`` command (its prefix taken off)."""
    text = body.strip()
    if text == PREFIX or text.startswith((PREFIX + " ", PREFIX + "\n")):
        return text[len(PREFIX):].strip(), True
    return text, False


def facts_of(site: FerrySite | None, run: str, test: str | None) -> intents.SessionFacts:
    """The chat's facts for one commented line: Ferry's change there (its rules, where they matched)."""
    edits: list[Edit] = []
    findings: list[ReviewItem] = []
    if site is not None:
        diff = f"--- a/{site.path}\n+++ b/{site.path}\n{site.change.text}"
        edits.append(Edit(step="rewrite", kind="codemod", rule=",".join(site.rules) or "codemods",
                          files=[site.path], diff=diff, reason=site.subject, site=site.where))
        findings = [ReviewItem(rule=r, file=site.path, line=n, category="auto", message="")
                    for r in site.rules for n in site.change.changed_old]
    return intents.SessionFacts(state="finished", status="migrated", run=run, test=test, edits=edits,
                                rules=known_rules(), findings=findings)


def thread_text(thread: list[ReviewComment], site: FerrySite | None) -> str:
    """The whole review thread as the model reads it, the newest comment (the instruction) last."""
    where = f"{thread[0].path} line {thread[0].line or thread[0].original_line}" if thread else "a line"
    lines = [f"A review thread on {where} of the pull request Ferry opened."]
    if site is not None:
        lines.append(f"Ferry's change there ({', '.join(site.rules) or 'a codemod'}):\n{site.change.text}")
    lines += [f"@{c.user.login}: {c.body}" for c in thread]
    lines.append("Answer the last comment; act on this line only.")
    return "\n\n".join(lines)


def understand(text: str, facts: intents.SessionFacts, thread: list[ReviewComment],
               site: FerrySite | None) -> intents.Reply:
    """The offline intents' reading of the instruction, or the model's when one is configured."""
    from agent.llm.config import configured

    if not configured():
        return intents.reply(text, facts)
    from agent.chat.model_replies import model_reply
    from agent.llm.client import ChatClient
    from agent.llm.config import from_env, resolve_limits

    try:
        client = ChatClient(from_env(limits=resolve_limits({})))
    except (LLMFailure, ValueError) as exc:
        logger.warning("review follow-up: the model is not usable: %s", exc)
        return intents.reply(text, facts)
    return model_reply(thread_text(thread, site) if thread else text, facts, client)
