"""compare_dumps finds real drift, localises it, and lets harmless differences pass."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F

from tests.parity.conftest import Model, train_probed
from tools.parity.compare import compare_dumps
from tools.parity.models import CompareOptions


def _train_with_functional(name: str, replacement, out: Path) -> Path:
    """The probed training run with ``torch.nn.functional.<name>`` replaced (restored afterwards)."""
    orig = getattr(F, name)
    setattr(F, name, replacement)
    try:
        return train_probed(out)
    finally:
        setattr(F, name, orig)


def test_identical_runs_pass(reference_dump: Path, tmp_path: Path) -> None:
    report = compare_dumps(reference_dump, train_probed(tmp_path / "tgt"))
    assert report.verdict == "pass" and report.first_divergence is None
    assert report.counts["fail"] == 0 and report.counts["compared"] > 50
    assert {t.tier for t in report.tensors} == {"assert_close"}
    assert report.scalars[0].key == "scalar:loss" and report.scalars[0].verdict == "pass"


def test_perturbed_layer_is_localised(reference_dump: Path, tmp_path: Path) -> None:
    def perturb(model: Model) -> None:
        with torch.no_grad():
            model.blocks[1].fc2.weight[0, :5] += 0.05

    report = compare_dumps(reference_dump, train_probed(tmp_path / "tgt", prepare=perturb))
    assert report.verdict == "fail"
    div = report.first_divergence
    assert div is not None
    assert (div.module, div.call, div.step, div.inputs) == ("Model.blocks.1.fc2", 0, 0, "pass")
    assert div.module_class == "Linear" and div.likely_cause == "computation"
    assert div.output.tolerances is not None and div.output.tolerances.dtype == "float32"
    # everything executed before it agreed
    order = [m.key for m in report.modules]
    before = report.modules[: order.index("Model.blocks.1.fc2#0")]
    assert before and all(m.output_verdict == "pass" for m in before)
    # the printed loss moved by ~5e-4: a loss curve is not judged by the cosine tier (a few positive numbers
    # of one size always have a cosine near 1), so the tiered check flags it, and says which tier decided
    loss = report.scalars[0]
    assert (loss.verdict, loss.tier, loss.tolerances.dtype) == ("warn", "tiered", "float32")


class _Bf16Matmul:
    """Emulates a device whose fp32 matmuls round their inputs to bf16 (what tpx does in 'medium')."""

    # torch's own setter: tpx wraps torch.set_float32_matmul_precision and would remember the
    # restore to "highest" as an explicit request, changing tpx's state for later tests
    _set_precision = staticmethod(getattr(torch.set_float32_matmul_precision, "__wrapped__",
                                          torch.set_float32_matmul_precision))

    def __enter__(self):
        self.orig = F.linear
        self.before = torch.get_float32_matmul_precision()
        self._set_precision("medium")

        def linear(x, w, b=None):
            return self.orig(x.to(torch.bfloat16).float(), w.to(torch.bfloat16).float(), b)

        F.linear = linear
        return self

    def __exit__(self, *exc):
        F.linear = self.orig
        self._set_precision(self.before)


def test_bf16_matmul_drift_is_attributed_to_matmul_precision(reference_dump: Path, tmp_path: Path) -> None:
    with _Bf16Matmul():
        target = train_probed(tmp_path / "tgt")
    report = compare_dumps(reference_dump, target)
    assert report.verdict in ("fail", "warn")
    div = report.first_divergence
    assert div is not None and div.module == "Model.embed" and div.likely_cause == "matmul_precision"
    assert "medium" in div.explanation and "highest" in div.explanation


def test_harmless_summation_reordering_passes(reference_dump: Path, tmp_path: Path) -> None:
    orig = F.linear

    def chunked_linear(x, w, b=None):
        # same maths, different summation order: split the reduction dim and add the parts in reverse
        k = x.shape[-1]
        parts = [orig(x[..., i : i + 4], w[:, i : i + 4]) for i in range(0, k, 4)]
        out = torch.stack(parts[::-1]).sum(0)
        return out + b if b is not None else out

    target = _train_with_functional("linear", chunked_linear, tmp_path / "tgt")
    report = compare_dumps(reference_dump, target)
    assert report.verdict == "pass", report.summary
    assert report.first_divergence is None
    assert any(t.tier != "assert_close" or (t.metrics and t.metrics.max_abs > 0) for t in report.tensors)


def test_nonfinite_output_is_localised(reference_dump: Path, tmp_path: Path) -> None:
    def poison(model: Model) -> None:
        with torch.no_grad():
            model.blocks[2].fc1.bias[3] = float("nan")

    report = compare_dumps(reference_dump, train_probed(tmp_path / "tgt", prepare=poison))
    div = report.first_divergence
    assert div is not None and div.module == "Model.blocks.2.fc1" and div.output.tier == "nonfinite"
    assert div.output.metrics.nonfinite_mismatch == 64  # one NaN column across the batch of 64


def test_different_input_data_is_blamed_on_data(reference_dump: Path, tmp_path: Path) -> None:
    report = compare_dumps(reference_dump, train_probed(tmp_path / "tgt", data_seed=2))
    div = report.first_divergence
    assert div is not None and div.likely_cause == "input_data" and div.module == "Model.embed"


def test_a_run_one_step_longer_fails_on_its_steps_while_its_curve_is_compared_over_the_common_values(
        reference_dump: Path, tmp_path: Path) -> None:
    report = compare_dumps(reference_dump, train_probed(tmp_path / "tgt", steps=4))
    loss = next(s for s in report.scalars if s.key == "scalar:loss")
    assert (loss.verdict, loss.tier) == ("warn", "shape")  # one value more: the first three match
    assert "reference printed 3 values, target 4; the first 3 compared" in loss.reason
    # the extra step is what fails: the trainings differ, whatever the printed values say
    assert report.verdict == "fail"
    steps = next(t for t in report.tensors if t.key == "optimizer:steps")
    assert steps.verdict == "fail" and "the reference stepped its optimizer 3 time(s), the target 4" in steps.reason


def test_a_curve_of_another_length_altogether_fails(reference_dump: Path, tmp_path: Path) -> None:
    report = compare_dumps(train_probed(tmp_path / "long", steps=12), train_probed(tmp_path / "tgt", steps=6))
    loss = next(s for s in report.scalars if s.key == "scalar:loss")
    assert loss.verdict == "fail" and "reference printed 12 values, target 6; the first 6 compared" in loss.reason


def test_golden_dump_enables_error_ratio(reference_dump: Path, tmp_path: Path) -> None:
    golden = train_probed(tmp_path / "golden")
    report = compare_dumps(reference_dump, train_probed(tmp_path / "tgt"), CompareOptions(golden_dir=golden))
    assert report.verdict == "pass" and report.golden_dir == str(golden)
    # a golden run equal to the reference (no autocast changed it) gives the ratio no denominator: no ratio,
    # and the summary says so instead of an inf or a made-up 1.0
    judged = [t for t in report.rows() if t.metrics is not None]
    assert judged and all(t.metrics.error_ratio is None and t.metrics.golden_equals_reference for t in judged)
    assert report.golden is not None and report.golden.same_as_reference == len(judged)
    assert "equal their golden counterpart" in report.golden.describe()


def test_dtype_change_fails_immediately_and_is_named(reference_dump: Path, tmp_path: Path) -> None:
    from tests.parity.conftest import Model
    from tools.probe.child import probe_session

    torch.manual_seed(0)
    model = Model().double()  # the "migrated" code computes in float64
    gen = torch.Generator().manual_seed(1)
    with probe_session(tmp_path / "tgt", steps=1):
        model(torch.randn(64, 16, generator=gen).double())
    report = compare_dumps(reference_dump, tmp_path / "tgt")
    outputs = [t for t in report.tensors if t.kind == "module_output" and t.step == 0]
    assert outputs and all((t.verdict, t.tier, t.metrics) == ("fail", "dtype", None) for t in outputs)
    div = report.first_divergence
    assert div is not None and div.likely_cause == "dtype" and "float64" in div.explanation


def test_low_precision_reduction_is_attributed_to_reduction_order(reference_dump: Path, tmp_path: Path) -> None:
    def half_accumulating_layer_norm(x, shape, weight=None, bias=None, eps=1e-5):
        # statistics accumulated in bfloat16: a different (worse) reduction, same formula
        mean = x.bfloat16().mean(-1, keepdim=True).float()
        var = (x - mean).bfloat16().pow(2).mean(-1, keepdim=True).float()
        return (x - mean) / torch.sqrt(var + eps) * weight + bias

    target = _train_with_functional("layer_norm", half_accumulating_layer_norm, tmp_path / "tgt")
    report = compare_dumps(reference_dump, target)
    div = report.first_divergence
    assert div is not None and div.module == "Model.blocks.0.norm" and div.inputs == "pass", report.summary
    assert div.likely_cause == "reduction_order" and div.output.metrics.cosine >= 0.9999


def test_fallback_op_inside_the_divergent_module_is_named(reference_dump: Path, tmp_path: Path) -> None:
    import json

    def perturb(model: Model) -> None:
        with torch.no_grad():
            model.blocks[0].norm.weight.mul_(1.1)

    target = train_probed(tmp_path / "tgt", prepare=perturb)
    # the target's tpx op statistics say layer_norm ran as a CPU fallback (as backend/stats.py reports it)
    index = json.loads((target / "index.json").read_text())
    index["meta"]["tpx"] = {"fallback_ops": ["aten::native_layer_norm", "aten::layer_norm"],
                            "matmul_precision": "highest"}
    (target / "index.json").write_text(json.dumps(index))
    div = compare_dumps(reference_dump, target).first_divergence
    assert div is not None and div.module == "Model.blocks.0.norm"
    assert div.likely_cause == "cpu_fallback" and "layer_norm" in div.explanation
