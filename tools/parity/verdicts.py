"""The parity verdict types (docs/numerics.md): light, so that reports can be read without torch."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from tools.parity.tolerances import Tolerances

Verdict = Literal["pass", "warn", "fail", "skipped"]
Tier = Literal[
    "shape", "dtype", "nonfinite", "assert_close", "cosine", "tiered", "error_ratio", "missing", "not_recorded",
    "drift_budget", "step_count",
]
VERDICT_RANK = {"pass": 0, "skipped": 0, "warn": 1, "fail": 2}


class TensorMetrics(BaseModel):
    numel: int
    max_abs: float
    max_rel: float
    cosine: float
    rmse: float
    nonfinite_mismatch: int
    frac_over_pass_rel: float | None = None
    frac_over_warn_rel: float | None = None
    assert_close_ok: bool
    error_ratio: float | None = None
    #: the golden counterpart equals the reference (a program that computes in float32 anyway): the error
    #: ratio has no denominator, so it is not used (never an inf that fails everything)
    golden_equals_reference: bool = False
    #: ||target - reference|| / ||reference|| over the finite elements (None where the reference is all
    #: zeros: no relative size to measure against); the drift budget of later training steps judges it
    rel_l2: float | None = None


class Judgement(BaseModel):
    verdict: Verdict
    tier: Tier
    reason: str
    metrics: TensorMetrics | None = None
    tolerances: Tolerances | None = None
