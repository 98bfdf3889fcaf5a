"""Metric and verdict-chain unit tests with hand-computed values (NUMERICS.md)."""

from __future__ import annotations

import math

import pytest
import torch

from tools.parity.metrics import compute_metrics, judge
from tools.parity.tolerances import tolerances_for


def test_hand_computed_metrics() -> None:
    ref = torch.tensor([1.0, 2.0, 3.0, 4.0])
    tgt = torch.tensor([1.0, 2.0, 3.0, 4.4])
    m = compute_metrics(ref, tgt, tolerances_for("float32"))
    assert m.max_abs == pytest.approx(0.4, abs=1e-6)
    assert m.max_rel == pytest.approx(0.1, abs=1e-6)
    assert m.rmse == pytest.approx(0.2, abs=1e-6)  # sqrt(0.4^2 / 4)
    expected_cos = (1 + 4 + 9 + 4 * 4.4) / (math.sqrt(30) * math.sqrt(1 + 4 + 9 + 4.4**2))
    assert m.cosine == pytest.approx(expected_cos, abs=1e-6)
    assert m.nonfinite_mismatch == 0 and m.numel == 4
    assert m.frac_over_pass_rel == pytest.approx(0.25)


def test_relative_error_uses_the_small_value_floor() -> None:
    ref = torch.tensor([0.0, 1.0])
    tgt = torch.tensor([1e-7, 1.0])
    assert compute_metrics(ref, tgt, tolerances_for("float32")).max_rel == pytest.approx(0.1, rel=1e-6)  # 1e-7/1e-6
    ref16, tgt16 = ref.to(torch.bfloat16), torch.tensor([1e-4, 1.0]).to(torch.bfloat16)
    m = compute_metrics(ref16, tgt16, tolerances_for("bfloat16"))
    assert m.max_rel == pytest.approx(float(tgt16[0]) / 1e-3, rel=1e-6)


def test_tolerance_rows_match_numerics_md() -> None:
    rows = {d: tolerances_for(d) for d in ("float16", "bfloat16", "float32", "float64")}
    assert (rows["float16"].rtol, rows["float16"].atol) == (1e-3, 1e-5)
    assert (rows["bfloat16"].rtol, rows["bfloat16"].atol) == (1.6e-2, 1e-5)
    assert (rows["float32"].rtol, rows["float32"].atol) == (1.3e-6, 1e-5)
    assert (rows["float64"].rtol, rows["float64"].atol) == (1e-7, 1e-7)
    assert rows["bfloat16"].floor == 1e-3 and rows["float32"].floor == 1e-6
    assert (rows["bfloat16"].tier_pass_frac, rows["bfloat16"].tier_pass_rel) == (1e-3, 1e-3)
    assert (rows["bfloat16"].tier_warn_frac, rows["bfloat16"].tier_warn_rel) == (1e-2, 1e-2)
    assert (rows["float32"].tier_pass_frac, rows["float32"].tier_warn_frac) == (1e-4, 1e-3)


def test_shape_and_dtype_mismatch_fail_immediately() -> None:
    j = judge(torch.zeros(2, 3), torch.zeros(3, 2))
    assert (j.verdict, j.tier, j.metrics) == ("fail", "shape", None)
    j = judge(torch.zeros(3), torch.zeros(3, dtype=torch.float16))
    assert (j.verdict, j.tier) == ("fail", "dtype")
    assert "float32" in j.reason and "float16" in j.reason


def test_nonfinite_mask_mismatch_fails() -> None:
    j = judge(torch.tensor([1.0, float("nan"), 3.0]), torch.tensor([1.0, 2.0, 3.0]))
    assert (j.verdict, j.tier, j.metrics.nonfinite_mismatch) == ("fail", "nonfinite", 1)
    j = judge(torch.tensor([float("inf")]), torch.tensor([float("-inf")]))
    assert (j.verdict, j.tier) == ("fail", "nonfinite")
    j = judge(torch.tensor([float("nan"), float("inf"), 1.0]), torch.tensor([float("nan"), float("inf"), 1.0]))
    assert (j.verdict, j.tier) == ("pass", "assert_close")


def test_assert_close_tier() -> None:
    ref = torch.linspace(-3, 3, 100)
    j = judge(ref, ref * (1 + 1e-7))
    assert (j.verdict, j.tier) == ("pass", "assert_close")
    assert (j.tolerances.rtol, j.tolerances.atol) == (1.3e-6, 1e-5)


def test_cosine_tier() -> None:
    ref = torch.linspace(1, 2, 100)
    tgt = ref + 5e-4  # fails rtol/atol but cosine ~1 and max abs < 1e-3
    j = judge(ref, tgt)
    assert (j.verdict, j.tier) == ("pass", "cosine")
    j = judge(ref, ref + 2e-3)  # max abs too large for the cosine tier, and every element off > 0.01%
    assert j.tier == "tiered" and j.verdict == "fail"


@pytest.mark.parametrize(("n_off", "verdict"), [(5, "pass"), (50, "warn"), (500, "fail")])
def test_tiered_check_fp32(n_off: int, verdict: str) -> None:
    ref = torch.full((100_000,), 100.0)
    tgt = ref.clone()
    tgt[:n_off] *= 1.005  # 0.5% off: 0.5 absolute, beyond the cosine tier's max abs
    j = judge(ref, tgt)
    assert (j.tier, j.verdict) == ("tiered", verdict)
    assert j.metrics.frac_over_pass_rel == pytest.approx(n_off / 100_000)
    assert j.tolerances.tier_pass_frac == 1e-4


def test_tiered_check_bf16() -> None:
    ref = torch.full((10_000,), 100.0, dtype=torch.bfloat16)
    tgt = ref.clone()
    tgt[:5] = 102.0  # 2% off on 0.05% of elements: <= 0.1% of elements off by > 0.1% -> pass
    j = judge(ref, tgt)
    assert (j.tier, j.verdict) == ("tiered", "pass")
    tgt[:50] = 102.0  # 0.5% of elements off by 2%: pass limit broken, warn needs <=1% off by >1% -> warn
    assert judge(ref, tgt).verdict == "warn"
    tgt[:500] = 102.0  # 5% off by 2% -> fail
    assert judge(ref, tgt).verdict == "fail"


def test_error_ratio_against_golden() -> None:
    torch.manual_seed(0)
    golden = torch.randn(1000)
    err = torch.randn(1000) * 0.05
    ref = golden + err
    j = judge(ref, golden + 1.1 * err, golden=golden)
    assert (j.tier, j.verdict) == ("error_ratio", "pass")
    assert j.metrics.error_ratio == pytest.approx(1.1, rel=1e-6)
    # a flipped error vector has the same norm: the ratio is exactly the scale factor
    tgt = golden + 1.5 * torch.flip(err, [0])
    j = judge(ref, tgt, golden=golden)
    assert j.metrics.error_ratio == pytest.approx(1.5, rel=1e-6)
    assert (j.tier, j.verdict) == ("error_ratio", "warn")
    j = judge(ref, golden + 3 * err, golden=golden)
    assert j.metrics.error_ratio == pytest.approx(3.0, rel=1e-6) and j.verdict == "fail"


def test_a_reference_equal_to_golden_gives_no_ratio_instead_of_inf() -> None:
    # a program without autocast: its reference is the golden result, ||reference - golden|| = 0
    torch.manual_seed(0)
    ref = torch.randn(1000)
    slightly = ref * (1 + 1e-7 * torch.randn(1000))  # float32 rounding: passes the tiers
    j = judge(ref, slightly, golden=ref.clone())
    assert j.verdict == "pass" and j.metrics.error_ratio is None and j.metrics.golden_equals_reference
    off = ref.clone()
    off[:100] += 1.0  # a real difference still fails, by the tiers, not by an infinite ratio
    j = judge(ref, off, golden=ref.clone())
    assert (j.verdict, j.tier) == ("fail", "tiered") and j.metrics.error_ratio is None
    assert "inf" not in j.reason


def test_integers_must_match_exactly() -> None:
    assert judge(torch.tensor([1, 2, 3]), torch.tensor([1, 2, 3])).verdict == "pass"
    assert judge(torch.tensor([1, 2, 3]), torch.tensor([1, 2, 4])).verdict == "fail"
