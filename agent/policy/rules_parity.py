"""Parity failure caused by bf16 matmuls -> ``torch.set_float32_matmul_precision("highest")`` at the
entry (or, for a notebook runner whose entry does not import torch, in the first cell that imports
torch of the notebook the command names), on the target device only (a real CUDA device keeps the
program's TF32 choice), after the program's own module-level precision settings (which would undo it
at import).

A test that fails ``torch.testing.assert_close`` on tpx by bf16 rounding gets the same statement in its
own module: :mod:`agent.policy.rules_tolerance`.

The edit is :mod:`tools.codemods.fixes` FIX008 (``target_matmul_precision``).
"""

from __future__ import annotations

import functools

from agent.policy.base import Diagnosis, FixContext, Proposal, make_proposal, new_text
from tools.codemods.fixes import target_matmul_precision
from tools.codemods.fixes.fix008_target_matmul_precision import MARKER
from tools.parity.models import ParityReport
from tools.scan.sources import edit_code_cell

RULE = "matmul_precision_highest"
KINDS = ("parity_failed",)


def attributed_to_matmul(parity: ParityReport | None) -> bool:
    """Whether the parity report blames matmul precision: its first divergence's ``likely_cause``
    says so, or no module was localised at all (then matmul precision is the first thing to rule
    out on tpx, whose default is bf16)."""
    first = parity.first_divergence if parity is not None else None
    return first is None or first.likely_cause == "matmul_precision"


def apply(diag: Diagnosis, ctx: FixContext) -> Proposal | None:
    if diag.kind not in KINDS or not attributed_to_matmul(diag.parity):
        return None
    if ctx.entry_file and f"{RULE}@{ctx.entry_file}:1" not in ctx.tried:
        text = ctx.text(ctx.entry_file)
        new = new_text(target_matmul_precision(text, filename=ctx.entry_file)) if text is not None else None
        if new is not None:
            return _proposal(ctx, ctx.entry_file, new, "at the program's entry")
    # a notebook runner (its entry does not import torch): the program is the notebook the command
    # names, whose cells share one namespace; the first cell that imports torch gets the setting
    for notebook in ctx.notebooks:
        text = ctx.text(notebook)
        if f"{RULE}@{notebook}:1" in ctx.tried or text is None or MARKER in text:
            continue
        edited = edit_code_cell(text, functools.partial(_fixed_cell, filename=notebook))
        if edited is not None:
            return _proposal(ctx, notebook, edited[0], f"in cell {edited[1]} of the notebook the command runs")
    return None


def _fixed_cell(cell: str, *, filename: str) -> str | None:
    return new_text(target_matmul_precision(cell, filename=filename))


def _proposal(ctx: FixContext, rel: str, new: str, where: str) -> Proposal | None:
    return make_proposal(
        ctx, rule=RULE, kind="policy", site=f"{rel}:1", new_files={rel: new},
        reason=("parity failed and the divergence points at matmul precision: tpx runs float32 matmuls with "
                f"bf16 inputs unless asked for 'highest'; set it {where}, after the program's own "
                "precision settings, for tpx only (real CUDA keeps the program's TF32 choice)"),
    )
