"""float64 on the device -> float32 at that site (tpx has no float64).

The edit is :mod:`tools.codemods.fixes` FIX002 (``float32_at``).
"""

from __future__ import annotations

from agent.policy.base import Diagnosis, FixContext, Proposal, first_site_fix, new_text
from tools.codemods.fixes import float32_at

RULE = "float64_to_float32"
KINDS = ("tpx_float64",)


def apply(diag: Diagnosis, ctx: FixContext) -> Proposal | None:
    if diag.kind not in KINDS:
        return None
    return first_site_fix(  # the deepest user frame first
        ctx, diag, rule=RULE, fix=lambda frame, text: new_text(float32_at(text, frame.line, filename=frame.file)),
        reason=lambda site: f"tpx has no float64: {diag.exc_type}: {diag.first_line} -> compute in float32 at {site}",
    )
