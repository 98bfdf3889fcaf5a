"""Which rules a chat message names: rule ids written out, or words of the rules' descriptions."""

from __future__ import annotations

import difflib
import re

from pydantic import BaseModel

from agent.migration import records

_FRY = re.compile(r"\bfry\s*-?\s*0*(\d{1,3})\b", re.I)
_WORD = re.compile(r"[a-z0-9]+")
#: a word of the user's -> the words of the rules' descriptions it stands for
SYNONYMS: dict[str, tuple[str, ...]] = {
    "amp": ("amp", "autocast", "gradscaler"), "mixed": ("amp", "autocast", "gradscaler"),
    "scaler": ("gradscaler",), "double": ("float64", "double"), "float64": ("float64", "double"),
    "precision": ("precision", "float32", "matmul"), "tf32": ("precision", "matmul"),
    "distributed": ("process", "group", "nccl", "distributed"), "ddp": ("distributed", "ddp"),
    "nccl": ("nccl",), "seed": ("seed", "manual"), "streams": ("stream",), "events": ("event",),
}
#: words of a message that never name a rule
STOP = frozenset(re.findall(r"\S+", """
    a an the this that these those it its change changes changed edit edits rule rules do don t not no skip
    revert undo please leave out without drop exclude more stop doing one ones thing to of for in on me you i
    we and or all any them with what made make remove roll back take apply applied can could would should
    just only also again part bit stuff fix fixes"""))


class RuleMatch(BaseModel):
    rules: list[str]
    all: bool = False  # the message asked for every match ("all AMP changes")


def applied_rules(edits: list[records.Edit]) -> list[str]:
    """The rule ids of the edits made (a rewrite edit lists several: ``FRY001,FRY002``), in order."""
    return list(dict.fromkeys(r for e in edits for r in e.rule.split(",") if r and r != "codemods"))


def rule_ids_in(msg: str, rules: dict[str, str]) -> tuple[list[str], str | None]:
    """The known rule ids the message writes out (``FRY24`` is FRY024), and a sentence about any that is unknown."""
    found: list[str] = []
    unknown: list[str] = []
    for m in _FRY.finditer(msg):
        rule_id = f"FRY{int(m.group(1)):03d}"
        (found if rule_id in rules else unknown).append(rule_id)
    lowered = msg.lower()
    found += [r for r in rules if not r.startswith("FRY") and re.search(rf"\b{re.escape(r.lower())}\b", lowered)]
    if unknown:
        hints = [f"{u} (did you mean {', '.join(close)}?)" if (close := difflib.get_close_matches(u, list(rules), 3))
                 else u for u in unknown]
        return found, f"I know no rule {', '.join(hints)}."
    return list(dict.fromkeys(found)), None


def match_rules(msg: str, rules: dict[str, str], applied: list[str]) -> RuleMatch:
    """The rules whose id or description has the most of the message's words (synonyms included); among
    several, those that made an edit in this session when some did."""
    words = [w for w in _WORD.findall(msg.lower()) if w not in STOP and len(w) > 1]
    if not words:
        return RuleMatch(rules=[])
    scores: dict[str, int] = {}
    for rule_id, description in rules.items():
        tokens = set(_WORD.findall(f"{rule_id} {description}".lower().replace("_", " ")))
        tokens |= set(_WORD.findall(rule_id.lower()))
        score = sum(1 for w in words if tokens & set(SYNONYMS.get(w, (w,))))
        if score:
            scores[rule_id] = score
    if not scores:
        return RuleMatch(rules=[])
    best = max(scores.values())
    top = [r for r, s in scores.items() if s == best]
    made = [r for r in top if r in applied]
    every = re.search(r"\b(all|every|each|both)\b", msg, re.I) is not None
    return RuleMatch(rules=made or top, all=every)
