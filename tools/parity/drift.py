"""Training-aware comparison: step 0 strictly, later steps against a drift budget (docs/parity.md).

Two runs of one training program that differ only by rounding (bf16 matmuls, another summation
order, fp16 autocast) agree at step 0 within docs/numerics.md's tiers, and then drift: every optimizer
step carries the step's rounding into the weights, and the next forward computes with those. A
tensor of step k >= 1 that the strict tiers fail is judged again by its relative error
``eps = ||target - reference|| / ||reference||`` against

    budget(k) = min(GROWTH * max(e0, floor(dtype)) * (k + 1), CAP)

where ``e0`` is the largest relative error measured at step 0 (the run's own rounding: its forward, and its
gradients and update where the probe recorded them), ``floor`` the dtype's rounding (assert_close's rtol)
and ``k`` the optimizer steps taken
before the tensor was computed: the error may grow linearly with the steps, the way independent
rounding errors add up, not faster. The same budget, per point, is the band of a printed loss curve.

What the budget never admits: anything at step 0 (forward, backward, optimizer update), a shape,
dtype or non-finite difference, a missing tensor, a run that stepped its optimizer a different number
of times, an error beyond ``CAP``, or any later step when step 0 itself failed.
"""

from __future__ import annotations

from collections.abc import Sequence

from tools.parity.models import DriftSummary, TensorComparison
from tools.parity.tolerances import tolerances_for
from tools.probe.dump import ProbeDump

#: how much faster than one step-0 error per step the drift may grow (room for the optimizer's
#: amplification of small gradient differences: Adam divides by the gradients' own size)
GROWTH = 4.0
#: no budget beyond this relative error, however many steps: a training that ends 5% away is not
#: the same training
CAP = 0.05
#: the strict tiers whose failure the budget may judge again (numbers that differ in size, not in kind)
E0_KINDS = frozenset({"module_input", "module_output", "record", "grad"})
NUMERIC_TIERS = frozenset({"assert_close", "tiered", "error_ratio"})


def uneven_tolerated(n_ref: int, n_target: int) -> bool:
    """Whether two printed streams of these lengths are still compared as one curve: a line or a tenth
    more or fewer (a rank that prints once more, a final summary line) is; a run that printed a different
    curve altogether is not. A skipped or extra optimizer step fails on its own (``optimizer:steps``)."""
    return abs(n_ref - n_target) <= max(1, n_ref // 10)


def floor_for(dtype: str | None) -> float:
    """The smallest step-0 error the budget starts from for ``dtype``: its rounding (assert_close's rtol,
    1.3e-6 for float32, 1e-3 for float16): an exact step 0 leaves room for rounding, not for more."""
    return tolerances_for(dtype or "float32").rtol


def budget(e0: float, dtype: str | None, step: int) -> float:
    """The relative error a tensor of ``step`` (optimizer steps before it) may have."""
    return min(GROWTH * max(e0, floor_for(dtype)) * (step + 1), CAP)


def trains(ref: ProbeDump) -> bool:
    """Whether the reference steps an optimizer (only then do later steps compute with other weights)."""
    return bool(ref.meta.get("optimizer_steps"))


def step_zero_error(items: Sequence[TensorComparison]) -> tuple[float, str | None]:
    """The largest relative error among the step-0 tensors (0 when they match exactly) and its key."""
    e0, at = 0.0, None
    for t in items:
        if t.kind not in E0_KINDS:
            continue  # an update's error is relative to the weights, not to what the step computed
        if t.step == 0 and t.metrics is not None and t.metrics.rel_l2 is not None and t.metrics.rel_l2 > e0:
            e0, at = t.metrics.rel_l2, t.key
    return e0, at


def judge_later_steps(ref: ProbeDump, tgt: ProbeDump, tensors: list[TensorComparison],
                      scalars: list[TensorComparison]) -> tuple[list[TensorComparison], list[TensorComparison],
                                                                 DriftSummary | None]:
    """The comparisons with each later-step tensor the strict tiers failed judged by the budget, the loss
    curves by their band, and what the budget did (None for a program that trains no optimizer)."""
    if not trains(ref):
        return tensors, scalars, None
    summary = DriftSummary(growth=GROWTH, cap=CAP)
    summary.ref_steps = _steps(ref)
    summary.target_steps = _steps(tgt)
    step0 = [t for t in tensors if t.step == 0]
    summary.step0_tensors = len(step0)
    summary.step0_failed = sum(1 for t in step0 if t.verdict == "fail")
    summary.e0, summary.e0_key = step_zero_error(step0)
    if summary.step0_failed:
        summary.note = (f"step 0 itself fails ({summary.step0_failed} tensor(s)): no drift budget for the later "
                        "steps, they are judged strictly")
        return tensors, scalars, summary
    tensors = [_judge_tensor(t, summary) for t in tensors]
    scalars = [_judge_curve(t, ref, tgt, summary) for t in scalars]
    return tensors, scalars, summary


def _steps(dump: ProbeDump) -> int | None:
    value = dump.meta.get("optimizer_steps_total")
    return int(value) if isinstance(value, int) else None


def _judge_tensor(t: TensorComparison, summary: DriftSummary) -> TensorComparison:
    if not t.step or t.verdict not in ("fail", "warn") or t.tier not in NUMERIC_TIERS:
        return t
    if t.metrics is None or t.metrics.rel_l2 is None:
        return t  # a reference of zeros: no relative size, the strict verdict stands (its reason says so)
    eps, allowed = t.metrics.rel_l2, budget(summary.e0, t.target_dtype or t.ref_dtype, t.step)
    summary.judged += 1
    if eps > allowed:
        summary.over += 1
        summary.first_over = summary.first_over or t.key
        return t.model_copy(update={"reason": t.reason + f"; beyond the drift budget of step {t.step}: relative "
                                              f"error {eps:.3g} > {allowed:.3g}"})
    summary.within += 1
    if summary.worst_ratio is None or eps / allowed > summary.worst_ratio:
        summary.worst_ratio, summary.worst_key, summary.worst_eps, summary.worst_budget = (
            eps / allowed, t.key, eps, allowed)
    return t.model_copy(update={
        "verdict": "pass", "tier": "drift_budget",
        "reason": (f"within the drift budget of step {t.step}: relative error {eps:.3g} <= {allowed:.3g} "
                   f"({GROWTH:g} x max(step-0 error {summary.e0:.3g}, floor {floor_for(t.target_dtype):.3g}) x "
                   f"{t.step + 1} steps); strictly: {t.reason}"),
    })


def _judge_curve(t: TensorComparison, ref: ProbeDump, tgt: ProbeDump, summary: DriftSummary) -> TensorComparison:
    """A printed stream (one value per step) point by point against the budget of the step it was printed at."""
    if t.verdict not in ("fail", "warn") or t.tier not in NUMERIC_TIERS:
        return t
    name = t.key.removeprefix("scalar:")
    r, g = ref.scalars.get(name, []), tgt.scalars.get(name, [])
    steps = ref.scalar_steps.get(name) or list(range(len(r)))
    if len(steps) != len(r) or not uneven_tolerated(len(r), len(g)):
        return t
    uneven = len(r) != len(g)  # the common prefix is judged; the verdict stays 'warn' (compare.py says why)
    n = min(len(r), len(g))
    r, g, steps = r[:n], g[:n], steps[:n]
    floor = floor_for(t.ref_dtype)
    worst, at, band_at = 0.0, 0, 0.0
    for i, (a, b) in enumerate(zip(r, g, strict=True)):
        rel = abs(b - a) / max(abs(a), floor)
        band = budget(summary.e0, t.ref_dtype, steps[i])
        if rel / band > worst and worst <= 1.0:  # the closest to its band, or the first value outside it
            worst, at, band_at = rel / band, i, band
    summary.curves_judged += 1
    last_band = budget(summary.e0, t.ref_dtype, steps[-1]) if steps else 0.0
    summary.curve_band = max(summary.curve_band or 0.0, last_band)
    where = f"value {at} (after {steps[at]} optimizer step(s))" if r else "no value"
    if worst > 1.0:
        summary.over += 1
        summary.first_over = summary.first_over or t.key
        return t.model_copy(update={"reason": t.reason + f"; leaves the drift band at {where}: relative "
                                              f"difference {worst * band_at:.3g} > {band_at:.3g}"})
    summary.curves_within += 1
    first_band = budget(summary.e0, t.ref_dtype, 0)
    return t.model_copy(update={
        "verdict": "warn" if uneven else "pass", "tier": "drift_budget",
        "reason": (f"every printed value within the drift band of its step (band {first_band:.3g} at step 0 growing "
                   f"to {last_band:.3g}; closest to it: {where}); strictly: {t.reason}"),
    })


def step_count_check(ref: ProbeDump, tgt: ProbeDump) -> TensorComparison | None:
    """A failing comparison when the two runs stepped their optimizers a different number of times (a step
    skipped, or an extra one): the trainings are not the same, whatever the tensors say."""
    r, g = _steps(ref), _steps(tgt)
    if r is None or g is None or r == g:
        return None
    return TensorComparison(key="optimizer:steps", kind="step_count", module="optimizer:steps", verdict="fail",
                            tier="step_count",
                            reason=f"the reference stepped its optimizer {r} time(s), the target {g}: a step was "
                                   f"{'skipped' if g < r else 'added'} on the target")
