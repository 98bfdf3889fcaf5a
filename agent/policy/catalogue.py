"""Every rule id a user can name (``ferry migrate --skip-rule``, the service's chat): the catalogue
codemods (``tools.codemods`` FRY001...) and the offline policy's rules, each with what it does."""

from __future__ import annotations

import difflib

from agent.policy.registry import descriptions
from tools.codemods.registry import all_rules


def known_rules() -> dict[str, str]:
    """rule id -> its description: the catalogue codemods first (FRY001...), then the policy rules."""
    out = {rule.ID: rule.DESCRIPTION for rule in all_rules()}
    out.update(descriptions())
    return out


def unknown_rule_message(rule_id: str, known: list[str] | None = None) -> str | None:
    """None when ``rule_id`` is known; else a sentence naming the closest known ids."""
    ids = known if known is not None else list(known_rules())
    if rule_id in ids:
        return None
    close = difflib.get_close_matches(rule_id, ids, n=3, cutoff=0.5) or difflib.get_close_matches(
        rule_id.upper(), ids, n=3, cutoff=0.5)
    hint = (f"; did you mean {', '.join(close)}?" if close
            else f"; known: {ids[0]}..{_last_fry(ids)} and the policy rules")
    return f"unknown rule id {rule_id!r}{hint}"


def _last_fry(ids: list[str]) -> str:
    fry = [i for i in ids if i.startswith("FRY")]
    return fry[-1] if fry else ids[-1]
