"""The knowledge base the model searches: Ferry's catalogue rules with their golden fixtures, site
fixes, offline policy rules, numerics tiers and the fixes that resolved earlier migrations, in a
SQLite FTS5 index (:mod:`agent.knowledge.index`; sources: :mod:`agent.knowledge.sources`).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from agent.knowledge import fixes
from agent.knowledge.index import KnowledgeBase, KnowledgeError, Match, default_dir, fts_query

if TYPE_CHECKING:
    from agent.policy.base import Diagnosis

__all__ = ["KnowledgeBase", "KnowledgeError", "Match", "default_dir", "diagnosis_query", "fts_query",
           "prompt_section", "record_fix", "search"]

logger = logging.getLogger(__name__)


def search(text: str, k: int = 5, kb: KnowledgeBase | None = None) -> list[Match]:
    """The ``k`` best matches for ``text`` in ``kb`` (default: ``KnowledgeBase.default()``)."""
    return (kb or KnowledgeBase.default()).search(text, k)


def record_fix(*, case: str, signature: str, exception: str, rule: str, diff: str, reason: str = "",
               directory: Path | None = None) -> int:
    """Record a fix that resolved ``case`` (see :func:`agent.knowledge.fixes.record_fix`) in the
    knowledge base of ``directory`` (default ``$FERRY_KB_PATH`` or ``~/.ferry/knowledge``)."""
    return fixes.record_fix(directory or default_dir(), case=case, signature=signature, exception=exception,
                            rule=rule, diff=diff, reason=reason)


def diagnosis_query(diag: Diagnosis) -> str:
    """What to search for a diagnosis: its exception, message, op and signature kind (for a parity
    failure the first divergence's likely cause and explanation)."""
    parts = [f"{diag.exc_type}: {diag.message[:1500]}" if diag.exc_type else diag.message[:1500],
             diag.op or "", diag.kind if diag.kind != "other" else ""]
    parts += [f.source for f in diag.frames[-2:] if f.source]
    div = diag.parity.first_divergence if diag.parity is not None else None
    if div is not None:
        parts += [div.likely_cause or "", div.explanation or "", " ".join(div.ops)]
    return "\n".join(p for p in parts if p)


def prompt_section(diag: Diagnosis, k: int = 3, kb: KnowledgeBase | None = None) -> str | None:
    """The "Knowledge base" section of the model's first prompt, None when nothing matches or the
    knowledge base cannot be searched here (logged: the model still has the rest of the prompt)."""
    try:
        matches = search(diagnosis_query(diag), k, kb)
    except KnowledgeError as exc:
        logger.warning("knowledge base not searched: %s", exc)
        return None
    if not matches:
        return None
    return ("Knowledge base (the closest catalogue rules, fixes, policy rules, numerics tiers and earlier "
            "fixes; search_knowledge finds more):\n" + "\n".join(f"- {m.line()}" for m in matches))
