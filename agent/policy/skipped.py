"""The rules a user asked to skip stay skipped by every path: a fix whose edit changes the code at a site a
skipped catalogue rule matches (the residual-CUDA fixer's device-generic equivalent of the very call
FRY013 rewrites, a model's edit) is that rule's change by another road, and is not made."""

from __future__ import annotations

import difflib
import tempfile
from pathlib import Path

from agent.migration import adapters
from agent.policy.base import FixContext, Proposal


def changed_old_lines(old: str, new: str) -> set[int]:
    """The 1-based lines of ``old`` that ``new`` removes or replaces (a line inserted beside a site leaves
    the site as it was)."""
    out: set[int] = set()
    matcher = difflib.SequenceMatcher(None, old.splitlines(), new.splitlines(), autojunk=False)
    for tag, i1, i2, _, _ in matcher.get_opcodes():
        if tag in ("replace", "delete"):
            out.update(range(i1 + 1, i2 + 1))
    return out


def skipped_sites(proposal: Proposal, ctx: FixContext) -> list[str]:
    """``RULE at file:line`` for each site of a skipped catalogue rule (the scan of the file before the edit)
    whose line the proposal changes; [] when it changes none."""
    skipped = {r for r in ctx.skip_rules if r.startswith("FRY")}
    if not skipped:
        return []
    found: list[str] = []
    with tempfile.TemporaryDirectory(prefix="ferry-skipped-") as tmp:
        for rel, new in sorted(proposal.files.items()):
            old = ctx.text(rel)
            if old is None or old == new or not rel.endswith(".py"):
                continue
            lines = changed_old_lines(old, new)
            target = Path(tmp) / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(old, encoding="utf-8")
            for f in adapters.scan(target).findings:
                if f.rule_id in skipped and lines & set(range(f.line, f.end_line + 1)):
                    found.append(f"{f.rule_id} at {rel}:{f.line}")
    return list(dict.fromkeys(found))
