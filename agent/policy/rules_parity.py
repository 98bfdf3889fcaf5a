"""Parity failure caused by bf16 matmuls -> ``torch.set_float32_matmul_precision("highest")`` at the
entry (where the command names no file that imports torch, ``python -c``, ``bash train.sh``, a launcher or a
console script: in the first module of the repository the run executed that does, as its probe dump lists
them; for a notebook runner whose entry does not import torch, in the first cell that imports
torch of the notebook the command names), on the target device only (a real CUDA device keeps the
program's TF32 choice), after the program's own module-level precision settings (which would undo it
at import).

A test that fails ``torch.testing.assert_close`` on tpx by bf16 rounding gets the same statement in its
own module: :mod:`agent.policy.rules_tolerance`.

The edit is :mod:`tools.codemods.fixes` FIX008 (``target_matmul_precision``).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

from agent.policy.base import ANY_KIND, Diagnosis, FixContext, PolicyRule, Proposal, make_proposal, new_text
from tools.codemods.fixes import target_matmul_precision
from tools.codemods.fixes.fix008_target_matmul_precision import MARKER
from tools.parity.models import ParityReport, removing_trial
from tools.scan.sources import edit_code_cell

RULE = "matmul_precision_highest"
KINDS = ("parity_failed",)


def attributed_to_matmul(parity: ParityReport | None) -> bool:
    """Whether the parity report blames matmul precision. Measured where side runs ran
    (``agent.migration.nodes.causes``): the last side run that removed the divergence had 'highest' matmuls on tpx
    (and the one without them, where it ran, did not remove it), or none removed it but 'highest' alone
    moved the first divergence elsewhere. Untested, the first divergence's
    ``likely_cause`` says so, or no module was localised at all (then matmul precision is the first
    thing to rule out on tpx, whose default is bf16)."""
    if parity is not None and parity.trials:
        done = removing_trial(parity.trials)
        if done is not None:
            return done.env.get("TPX_MATMUL_PRECISION") == "highest"
        # 'highest' alone took the first divergence away and a later one remains (another fault from a later
        # step on): the precision is the first one's cause; with it in the code the next round localises the rest
        return any(t.env == {"TPX_MATMUL_PRECISION": "highest"} and t.moved for t in parity.trials)
    first = parity.first_divergence if parity is not None else None
    return first is None or first.likely_cause == "matmul_precision"


@functools.lru_cache(maxsize=16)
def _with_precision(text: str, rel: str) -> str | None:
    """``text`` (the file ``rel``) with FIX008 written in, or None where it takes none: a pure function of its
    arguments, kept for the same file's next ask (a migration asks three times: beside the evidence run, for
    the precision trial, and when the policy writes it; libcst, a tenth of a second each)."""
    return new_text(target_matmul_precision(text, filename=rel))


def program_start_fix(ctx: FixContext, texts: Mapping[str, str] | None = None,
                      rule: str | None = RULE) -> tuple[str, str] | None:
    """(file, its new text): FIX008 in the first of the program's files (``FixContext.program_files``: the
    entry the command names, else the repository's files in the order the run executed them) that imports
    torch at module level; None when one of them has it already (or ``rule`` was tried at one: it goes in
    one place only) or none takes it. ``texts``: files as an edit being built has them."""
    for rel in ctx.program_files():
        text = (texts or {}).get(rel, ctx.text(rel))
        if text is None:
            continue
        if MARKER in text or (rule is not None and f"{rule}@{rel}:1" in ctx.tried):
            return None
        new = _with_precision(text, rel)
        if new is not None:
            return rel, new
    return None


def apply(diag: Diagnosis, ctx: FixContext) -> Proposal | None:
    if diag.kind not in KINDS or not attributed_to_matmul(diag.parity):
        return None
    found = program_start_fix(ctx)
    if found is not None:
        rel, new = found
        where = ("at the program's entry" if rel == ctx.entry_file else
                 f"in {rel}, the first module of the repository the run executes that imports torch (the command "
                 "names no file of the repository that does)")
        return _proposal(ctx, rel, new, where, diag.parity)
    # a notebook runner (its entry does not import torch): the program is the notebook the command
    # names, whose cells share one namespace; the first cell that imports torch gets the setting
    for notebook in ctx.notebooks:
        text = ctx.text(notebook)
        if f"{RULE}@{notebook}:1" in ctx.tried or text is None or MARKER in text:
            continue
        edited = edit_code_cell(text, functools.partial(_fixed_cell, filename=notebook))
        if edited is not None:
            return _proposal(ctx, notebook, edited[0], f"in cell {edited[1]} of the notebook the command runs",
                             diag.parity)
    return None


def drift_made_exact_by_highest(parity: ParityReport | None) -> bool:
    """Whether a parity that passed by the drift budget was measured exact with 'highest' matmuls on tpx
    (the strict side run of ``agent.migration.nodes.causes`` removed the later steps' drift)."""
    if parity is None or not parity.passed:
        return False
    done = removing_trial([t for t in parity.trials if t.drift])
    return done is not None and done.env.get("TPX_MATMUL_PRECISION") == "highest"


def apply_after_drift(diag: Diagnosis, ctx: FixContext) -> Proposal | None:
    """The program's tests fail on tpx after a parity that passed only by the drift budget, and the side run
    measured that 'highest' matmuls make the training exact: tests that compare exactly (``torch.equal``,
    ``rtol=0``) see that drift. FIX008 is the tpx-only setting the policy allows; tried once."""
    if diag.phase != "test" or not drift_made_exact_by_highest(diag.parity):
        return None
    found = program_start_fix(ctx)
    if found is None:
        return None
    rel, new = found
    where = "at the program's entry" if rel == ctx.entry_file else f"in {rel}, the first module the run executes " \
                                                                   "that imports torch"
    return make_proposal(
        ctx, rule=RULE, kind="policy", site=f"{rel}:1", new_files={rel: new},
        reason=("the tests failed after a parity that passed by the drift budget, and " + _evidence(diag.parity)
                + f": tests that compare exactly see bf16 rounding; set full fp32 matmuls {where}, for tpx only "
                  "(real CUDA keeps the program's TF32 choice)"),
    )


def _fixed_cell(cell: str, *, filename: str) -> str | None:
    return new_text(target_matmul_precision(cell, filename=filename))


def _evidence(parity: ParityReport | None) -> str:
    measured = parity.measured() if parity is not None else ""
    return f"measured: {measured}" if measured else "the divergence points at matmul precision"


def _proposal(ctx: FixContext, rel: str, new: str, where: str, parity: ParityReport | None) -> Proposal | None:
    return make_proposal(
        ctx, rule=RULE, kind="policy", site=f"{rel}:1", new_files={rel: new},
        reason=("parity failed and " + _evidence(parity) + ": tpx runs float32 matmuls with "
                f"bf16 inputs unless asked for 'highest'; set it {where}, after the program's own "
                "precision settings, for tpx only (real CUDA keeps the program's TF32 choice)"),
    )


class MatmulPrecisionHighest(PolicyRule):
    ID = RULE
    KINDS = KINDS
    ORDER = 80
    DESCRIPTION = ("parity failure from bf16 matmuls, or failing tests after a drift that 'highest' was "
                   "measured to remove -> torch.set_float32_matmul_precision('highest') on tpx")
    apply = staticmethod(apply)


class MatmulPrecisionAfterDrift(PolicyRule):
    """Any failing test, asked last: the parity that the drift budget passed was measured exact with
    'highest' matmuls (the same fix as :class:`MatmulPrecisionHighest`, reached from the tests)."""

    ID = RULE
    KINDS = (ANY_KIND,)
    ORDER = 900
    apply = staticmethod(apply_after_drift)
