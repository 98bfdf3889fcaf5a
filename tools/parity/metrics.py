"""Per-tensor error metrics and the docs/numerics.md verdict chain (all in float64 on CPU)."""

from __future__ import annotations

import torch

from tools.parity.tolerances import Tolerances, tolerances_for
from tools.parity.verdicts import VERDICT_RANK, Judgement, TensorMetrics, Tier, Verdict  # noqa: F401  (re-exported)


def dtype_name(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


def _as_f64(t: torch.Tensor) -> torch.Tensor:
    t = t.detach().to("cpu")
    if t.is_complex():
        t = torch.view_as_real(t.resolve_conj())
    return t.to(torch.float64).reshape(-1)


def compute_metrics(ref: torch.Tensor, target: torch.Tensor, tol: Tolerances,
                    golden: torch.Tensor | None = None) -> TensorMetrics:
    """Metrics of ``target`` against ``ref`` (same shape), relative error floored at ``tol.floor``.

    Every metric is computed in float64 as before; a pair with no NaN or infinity (the common case) skips
    the masks and copies that only the non-finite bookkeeping needs, and each intermediate is made once."""
    a, b = _as_f64(ref), _as_f64(target)
    fa, fb = torch.isfinite(a), torch.isfinite(b)
    if bool(fa.all()) and bool(fb.all()):
        nonfinite_mismatch = 0
        mask = None
        a_f, b_f = a, b
    else:
        both_nonfinite = ~fa & ~fb
        same_special = (a == b) | (torch.isnan(a) & torch.isnan(b))
        nonfinite_mismatch = int((fa != fb).sum()) + int((both_nonfinite & ~same_special).sum())
        mask = fa & fb
        a_f, b_f = a[mask], b[mask]
    n = int(a_f.numel())
    if n == 0:
        return TensorMetrics(numel=int(a.numel()), max_abs=0.0, max_rel=0.0, cosine=1.0, rmse=0.0,
                             nonfinite_mismatch=nonfinite_mismatch, frac_over_pass_rel=0.0,
                             frac_over_warn_rel=0.0, assert_close_ok=True, rel_l2=0.0)
    diff = (b_f - a_f).abs_()
    a_abs = a_f.abs()
    if tol.floor > 0:
        rel = diff / a_abs.clamp_min(tol.floor)
    else:
        rel = diff / a_abs
        rel.masked_fill_(diff == 0, 0.0)  # 0/0 -> 0 for exact dtypes
    na, nb = float(a_f.norm()), float(b_f.norm())
    if na == 0.0 and nb == 0.0:
        cosine = 1.0
    elif na == 0.0 or nb == 0.0:
        cosine = 0.0
    else:
        cosine = float(torch.dot(a_f, b_f)) / (na * nb)
        cosine = max(-1.0, min(1.0, cosine))
    ok = bool((diff <= a_abs.mul_(tol.rtol).add_(tol.atol)).all())  # a_abs is not used after this
    ratio = None
    same_as_golden = False
    if golden is not None:
        g = _as_f64(golden)
        if g.shape == a.shape:
            g_f = g[mask] if mask is not None else g
            finite = torch.isfinite(g_f)
            den = float((a_f - g_f)[finite].norm())
            num = float((b_f - g_f)[finite].norm())
            if den > 0:
                ratio = num / den
            else:  # the reference is the golden result: the ratio would divide by zero
                same_as_golden = True
    diff_norm = float(diff.norm())
    return TensorMetrics(
        numel=int(a.numel()),
        max_abs=float(diff.max()),
        max_rel=float(rel.max()),
        cosine=cosine,
        rmse=float(diff.pow(2).mean().sqrt()),
        nonfinite_mismatch=nonfinite_mismatch,
        frac_over_pass_rel=int((rel > tol.tier_pass_rel).sum()) / n if tol.tier_pass_rel else None,
        frac_over_warn_rel=int((rel > tol.tier_warn_rel).sum()) / n if tol.tier_warn_rel else None,
        assert_close_ok=ok,
        rel_l2=diff_norm / na if na > 0 else None,
        error_ratio=ratio,
        golden_equals_reference=same_as_golden,
    )


def judge(ref: torch.Tensor, target: torch.Tensor, golden: torch.Tensor | None = None,
          dtype: str | None = None, curve: bool = False) -> Judgement:
    """The docs/numerics.md chain: shape/dtype -> non-finite masks -> assert_close OR cosine OR tiered
    (OR the error ratio against an fp32 golden run, when one is given). ``curve``: a printed stream
    (a loss curve, one value per step), which the cosine tier does not judge: a few positive numbers of
    one size have a cosine near 1 whatever their differences, so a loss that leaves the reference's
    curve at step 2 would pass by it."""
    ref_dtype, tgt_dtype = dtype_name(ref), dtype_name(target)
    if tuple(ref.shape) != tuple(target.shape):
        return Judgement(verdict="fail", tier="shape",
                         reason=f"shape mismatch: reference {list(ref.shape)} vs target {list(target.shape)}")
    if ref_dtype != tgt_dtype:
        return Judgement(verdict="fail", tier="dtype",
                         reason=f"dtype mismatch: reference {ref_dtype} vs target {tgt_dtype}")
    tol = tolerances_for(dtype or ref_dtype)
    m = compute_metrics(ref, target, tol, golden)
    if m.nonfinite_mismatch:
        return Judgement(verdict="fail", tier="nonfinite", metrics=m, tolerances=tol,
                         reason=f"{m.nonfinite_mismatch} non-finite value(s) (nan/inf) differ")
    if m.assert_close_ok:
        return Judgement(verdict="pass", tier="assert_close", metrics=m, tolerances=tol,
                         reason=f"within assert_close defaults (rtol={tol.rtol:g}, atol={tol.atol:g})")
    if not curve and m.cosine > tol.cosine_min and m.max_abs < tol.cosine_max_abs:
        return Judgement(verdict="pass", tier="cosine", metrics=m, tolerances=tol,
                         reason=f"cosine {m.cosine:.6f} > {tol.cosine_min} and max abs {m.max_abs:.3g} "
                                f"< {tol.cosine_max_abs:g}")
    tiered = _tiered(m, tol)
    if tiered is not None and tiered.verdict == "pass":
        return tiered
    ratio = _ratio(m, tol)
    if ratio is not None and ratio.verdict == "pass":
        return ratio
    options = [j for j in (tiered, ratio) if j is not None]
    if options:
        return min(options, key=lambda j: VERDICT_RANK[j.verdict])
    return Judgement(verdict="fail", tier="assert_close", metrics=m, tolerances=tol,
                     reason=f"{ref_dtype} values must match exactly; max abs {m.max_abs:.3g}")


def _tiered(m: TensorMetrics, tol: Tolerances) -> Judgement | None:
    if (tol.tier_pass_rel is None or tol.tier_pass_frac is None or tol.tier_warn_rel is None
            or tol.tier_warn_frac is None or m.frac_over_pass_rel is None or m.frac_over_warn_rel is None):
        return None
    detail = (f"{m.frac_over_pass_rel:.4%} of elements off by > {tol.tier_pass_rel:.2%} "
              f"(pass limit {tol.tier_pass_frac:.2%}), "
              f"{m.frac_over_warn_rel:.4%} off by > {tol.tier_warn_rel:.2%} (warn limit {tol.tier_warn_frac:.2%}); "
              f"max rel {m.max_rel:.3g}, cosine {m.cosine:.6f}")
    if m.frac_over_pass_rel <= tol.tier_pass_frac:
        return Judgement(verdict="pass", tier="tiered", metrics=m, tolerances=tol, reason=detail)
    verdict: Verdict = "warn" if m.frac_over_warn_rel <= tol.tier_warn_frac else "fail"
    return Judgement(verdict=verdict, tier="tiered", metrics=m, tolerances=tol, reason=detail)


def _ratio(m: TensorMetrics, tol: Tolerances) -> Judgement | None:
    if m.error_ratio is None:
        return None
    r = m.error_ratio
    verdict: Verdict = "pass" if r <= tol.ratio_pass else "warn" if r <= tol.ratio_warn else "fail"
    return Judgement(verdict=verdict, tier="error_ratio", metrics=m, tolerances=tol,
                     reason=f"error ratio ||target-golden||/||reference-golden|| = {r:.3g} "
                            f"(pass <= {tol.ratio_pass}, warn <= {tol.ratio_warn})")
