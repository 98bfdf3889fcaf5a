"""float64 on the device -> float32 at that site (tpx has no float64), with the precision settings
docs/numerics.md asks of code written for float64: full fp32 matmuls on the target device at the entry.

The edits are :mod:`tools.codemods.fixes` FIX002 (``float32_at``) and FIX008 (``target_matmul_precision``).
"""

from __future__ import annotations

from agent.policy.base import Diagnosis, FixContext, PolicyRule, Proposal, first_site_fix, make_proposal, new_text
from agent.policy.rules_parity import program_start_fix
from tools.codemods.fixes import float32_at
from tools.codemods.fixes.fix002_float32 import Float32

RULE = "float64_to_float32"
KINDS = ("tpx_float64",)


def apply(diag: Diagnosis, ctx: FixContext) -> Proposal | None:
    if diag.kind not in KINDS:
        return None
    proposal = first_site_fix(  # the deepest user frame first
        ctx, diag, rule=RULE, fix=lambda frame, text: new_text(float32_at(text, frame.line, filename=frame.file)),
        reason=lambda site: f"tpx has no float64: {diag.exc_type}: {diag.first_line} -> compute in float32 at {site}",
    )
    if proposal is None:
        return None
    with_precision = _with_full_fp32_matmuls(proposal, ctx)
    # the target now computes in float32 where the reference computes in float64: parity judges it so
    return (with_precision or proposal).model_copy(update={"dtype_changes": dict(Float32.DTYPE_CHANGES)})


def _with_full_fp32_matmuls(proposal: Proposal, ctx: FixContext) -> Proposal | None:
    """``proposal`` with ``set_float32_matmul_precision("highest")`` for the target device added at the
    program's start (``program_start_fix``: code written for float64 loses too much with tpx's bf16-rounded
    matmuls, e.g. a Cholesky of a kernel matrix); None when no file of it takes it or one has it already."""
    found = program_start_fix(ctx, proposal.files, rule=None)
    if found is None:
        return None
    entry, new = found
    return make_proposal(ctx, rule=proposal.rule, kind=proposal.kind, site=proposal.site,
                         new_files={**proposal.files, entry: new},
                         reason=f"{proposal.reason}; full fp32 matmuls on the target device at {entry} (code written "
                                "for float64 needs them: tpx rounds float32 matmul inputs to bf16 by default)")


class Float64ToFloat32(PolicyRule):
    ID = RULE
    KINDS = KINDS
    ORDER = 30
    DESCRIPTION = "float64 on tpx -> float32 at the failing site (torch.float64/.double() -> float32/.float())"
    apply = staticmethod(apply)
