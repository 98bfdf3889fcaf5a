"""Tolerance tables (docs/numerics.md), as data. Every verdict reports the row it used."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

# torch.testing.assert_close defaults (rtol, atol) per dtype.
ASSERT_CLOSE = {
    "float16": (1e-3, 1e-5),
    "bfloat16": (1.6e-2, 1e-5),
    "float32": (1.3e-6, 1e-5),
    "float64": (1e-7, 1e-7),
    "complex64": (1.3e-6, 1e-5),
    "complex128": (1e-7, 1e-7),
}
# Small-value floor for relative error.
FLOOR = {"float16": 1e-3, "bfloat16": 1e-3, "float32": 1e-6, "float64": 1e-6}
# Tiered check: (pass: at most FRAC of elements off by more than REL, warn: same, looser).
TIERED = {
    "float16": {"pass": (1e-3, 1e-3), "warn": (1e-2, 1e-2)},
    "bfloat16": {"pass": (1e-3, 1e-3), "warn": (1e-2, 1e-2)},
    "float32": {"pass": (1e-4, 1e-4), "warn": (1e-3, 1e-3)},
    # the numerics policy names no fp64 tier; fp64 is held to the fp32 tier (documented in docs/parity.md).
    "float64": {"pass": (1e-4, 1e-4), "warn": (1e-3, 1e-3)},
}
COSINE_MIN = 0.99
COSINE_MAX_ABS = 1e-3
RATIO_PASS = 1.2
RATIO_WARN = 2.0
FLOATING = {"float16", "bfloat16", "float32", "float64"}
COMPLEX_BASE = {"complex64": "float32", "complex128": "float64", "complex32": "float16"}
# Printed scalar streams are compared as float32 values.
SCALAR_DTYPE = "float32"


class Tolerances(BaseModel):
    """The tolerances a verdict was judged with (reported with every verdict)."""

    dtype: str
    rtol: float
    atol: float
    floor: float
    cosine_min: float = COSINE_MIN
    cosine_max_abs: float = COSINE_MAX_ABS
    tier_pass_frac: float | None = None
    tier_pass_rel: float | None = None
    tier_warn_frac: float | None = None
    tier_warn_rel: float | None = None
    ratio_pass: float = RATIO_PASS
    ratio_warn: float = RATIO_WARN


def tolerances_for(dtype: str) -> Tolerances:
    """Tolerances for a dtype name such as ``float32`` (integers and bool: exact)."""
    base = COMPLEX_BASE.get(dtype, dtype)
    if dtype in ASSERT_CLOSE:
        rtol, atol = ASSERT_CLOSE[dtype]
    elif base in ASSERT_CLOSE:
        rtol, atol = ASSERT_CLOSE[base]
    else:
        rtol, atol = 0.0, 0.0
    tier = TIERED.get(base)
    return Tolerances(
        dtype=dtype,
        rtol=rtol,
        atol=atol,
        floor=FLOOR.get(base, 0.0 if base not in FLOATING else 1e-6) if base in FLOATING else 1.0,
        tier_pass_frac=tier["pass"][0] if tier else None,
        tier_pass_rel=tier["pass"][1] if tier else None,
        tier_warn_frac=tier["warn"][0] if tier else None,
        tier_warn_rel=tier["warn"][1] if tier else None,
    )


def tolerance_table() -> dict[str, dict[str, Any]]:
    """All rows, for reports."""
    return {d: tolerances_for(d).model_dump() for d in ("float16", "bfloat16", "float32", "float64")}
