"""A test's own float32 tolerance check fails on tpx by what bf16 matmuls round -> full fp32 matmuls on
the target device in that test module (FIX008, ``target_matmul_precision``).

tpx runs float32 matmuls with bf16-rounded inputs unless asked for "highest"; CUDA's default is full
float32 ("highest": TF32 is off unless the program turns it on), so a test that compares two float32 paths
at ``rtol=1e-4`` passes on CUDA and fails on tpx by about bf16's rounding (2**-8 relative per input). The
fix goes where the test runs: its module, which pytest imports before it runs the test (the program's
entry file is not imported by such a test). The statement applies to the target device only (real CUDA
keeps the program's TF32 choice) and to every test of the session that runs after the import.

Only ``torch.testing.assert_close``'s messages ("Tensor-likes are not close!", "Scalars are not close!")
whose greatest difference bf16 rounding can explain: a few bf16 roundings relative (5%), or, where the
relative difference is large only because an element is near zero, a few bf16 ulps of an O(1) result
absolute (0.01); anything larger is not precision.
"""

from __future__ import annotations

import re

from agent.policy.base import Diagnosis, FixContext, PolicyRule, Proposal, make_proposal, new_text
from tools.codemods.fixes import target_matmul_precision

RULE = "test_tolerance_matmul_precision"
KINDS = ("other",)

NOT_CLOSE = ("Tensor-likes are not close!", "Scalars are not close!")
#: the largest relative difference bf16-rounded matmul inputs explain: 8 significant bits (2**-8 = 0.0039 per
#: input), a few times that through a small network; a larger difference is a different result, not precision
BF16_EXPLAINS = 0.05
#: the largest absolute difference it explains where elements near zero make the relative one large: a bf16 ulp
#: at magnitude 1-2 is 2**-7 = 0.0078
BF16_EXPLAINS_ABS = 0.01
_RELATIVE = re.compile(r"Greatest relative difference: ([0-9.eE+-]+|inf|nan)")
_ABSOLUTE = re.compile(r"Greatest absolute difference: ([0-9.eE+-]+|inf|nan)")


def _greatest(pattern: re.Pattern[str], message: str) -> float | None:
    m = pattern.search(message)
    if m is None:
        return None
    try:
        return float(m.group(1))
    except ValueError:
        return None


def relative_difference(message: str) -> float | None:
    """The greatest relative difference assert_close reported, or None when the message has none."""
    return _greatest(_RELATIVE, message)


def absolute_difference(message: str) -> float | None:
    """The greatest absolute difference assert_close reported, or None when the message has none."""
    return _greatest(_ABSOLUTE, message)


def apply(diag: Diagnosis, ctx: FixContext) -> Proposal | None:
    if diag.phase != "test" or diag.kind not in KINDS or diag.exc_type != "AssertionError":
        return None
    if diag.first_line.strip() not in NOT_CLOSE or not diag.frames:
        return None
    rel, absolute = relative_difference(diag.message), absolute_difference(diag.message)
    if rel is None or not (rel <= BF16_EXPLAINS or (absolute is not None and absolute <= BF16_EXPLAINS_ABS)):
        return None
    test_file = diag.frames[0].file  # outermost user frame: the test module pytest imported
    site = f"{test_file}:1"
    if f"{RULE}@{site}" in ctx.tried:
        return None
    text = ctx.text(test_file)
    new = new_text(target_matmul_precision(text, filename=test_file)) if text is not None else None
    if new is None:
        return None
    return make_proposal(
        ctx, rule=RULE, kind="policy", site=site, new_files={test_file: new},
        reason=(f"a float32 tolerance check of the tests failed at {diag.where()} by a relative {rel:.2g} "
                f"(absolute {absolute if absolute is not None else float('nan'):.2g}), what "
                "tpx's bf16-rounded float32 matmuls lose (CUDA computes them in full float32 by default): full "
                f"fp32 matmuls on the target device in {test_file}, for the test session on tpx only"),
    )


class TestToleranceMatmulPrecision(PolicyRule):
    ID = RULE
    KINDS = KINDS
    ORDER = 90
    DESCRIPTION = ("a test's float32 assert_close fails by what bf16 matmuls round -> full fp32 matmuls "
                   "on tpx in that test module")
    apply = staticmethod(apply)
