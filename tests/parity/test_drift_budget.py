"""Training-aware parity: step 0 strictly, later steps against the drift budget (tools/parity/drift.py).

Each target below trains the reference's program once more in-process under the probe, with one
difference: a chip's rounding in every matmul (the drift a chip's kernels cause: it must
pass), or an injected fault (a wrong learning rate, a wrong gradient, an op that computes otherwise
from step 2, a skipped optimizer step: each must fail, with the right place named)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn as nn

from tests.parity.conftest import Model
from tools.parity.compare import compare_dumps
from tools.parity.drift import CAP, GROWTH, budget, floor_for
from tools.parity.models import CompareOptions
from tools.probe.child import probe_session

STEPS = 5


class Fault:
    """What a target run does differently (nothing, for the reference)."""

    lr_scale = 1.0
    optimizer = "adamw"
    extra_losses = 0  # 'loss:' lines printed after the loop (a rank or a summary printing once more)

    def prepare(self, model: Model) -> None: ...

    def after_backward(self, model: Model, step: int) -> None: ...

    def take_step(self, step: int) -> bool:
        return True

    def after_step(self, model: Model, step: int) -> None: ...


def train(out: Path, fault: Fault | None = None, *, probe_steps: int = 3) -> Path:
    fault = fault or Fault()
    torch.manual_seed(0)
    model = Model(width=64)
    fault.prepare(model)
    params = model.parameters()
    opt: torch.optim.Optimizer = (torch.optim.AdamW(params, lr=1e-3 * fault.lr_scale) if fault.optimizer == "adamw"
                                  else torch.optim.SGD(params, lr=0.05 * fault.lr_scale))
    gen = torch.Generator().manual_seed(1)
    with probe_session(out, steps=probe_steps):
        for step in range(STEPS):
            x, y = torch.randn(64, 16, generator=gen), torch.randn(64, 4, generator=gen)
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            fault.after_backward(model, step)
            if fault.take_step(step):
                opt.step()
            fault.after_step(model, step)
            opt.zero_grad()
            print(f"step {step} | loss: {loss.item():.6f}")
        for _ in range(fault.extra_losses):
            print(f"final | loss: {loss.item():.6f}")
    return out


class ChipRounding(Fault):
    """Every Linear multiplies its inputs and weights rounded to a 12-bit mantissa, as a chip's matmul unit
    rounds (between bf16's 8 bits and float32's 23): rounding-sized differences from step 0 on, which the
    optimizer steps carry into the weights."""

    BITS = 12

    def prepare(self, model: Model) -> None:
        def rounded(t: torch.Tensor) -> torch.Tensor:
            mantissa, exponent = torch.frexp(t)
            q = torch.ldexp(torch.round(mantissa * 2**self.BITS) / 2**self.BITS, exponent)
            return t + (q - t).detach()  # the gradient flows as through the unrounded value

        for module in model.modules():
            if isinstance(module, nn.Linear):
                def forward(x: torch.Tensor, m: nn.Linear = module) -> torch.Tensor:
                    return nn.functional.linear(rounded(x), rounded(m.weight), m.bias)

                module.forward = forward  # type: ignore[method-assign]


class WrongLr(Fault):
    lr_scale = 1.5


class WrongGradient(Fault):
    optimizer = "sgd"  # (Adam would normalise a scaled gradient away: the same training)

    def after_backward(self, model: Model, step: int) -> None:
        assert model.head.weight.grad is not None
        model.head.weight.grad.mul_(0.5)


class OtherActivationFromStep2(Fault):
    """A porting bug that shows only from step 2: the second block's activation is another one (the
    sigmoid approximation of GELU some accelerator ports use)."""

    def prepare(self, model: Model) -> None:
        act = model.blocks[1].act
        calls = {"n": 0}

        def forward(x: torch.Tensor) -> torch.Tensor:
            calls["n"] += 1
            return x * torch.sigmoid(1.702 * x) if calls["n"] > 2 else nn.functional.gelu(x)

        act.forward = forward  # type: ignore[method-assign]


class SkipsStep(Fault):
    def __init__(self, skipped: int) -> None:
        self.skipped = skipped

    def take_step(self, step: int) -> bool:
        return step != self.skipped


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return train(tmp_path_factory.mktemp("drift") / "ref")


def compare_with(reference: Path, tmp_path: Path, fault: Fault, **options: object):
    return compare_dumps(reference, train(tmp_path / "target", fault), CompareOptions(**options))


def test_the_budget_grows_with_the_steps_from_the_measured_step0_error_and_is_capped() -> None:
    assert floor_for("float32") == 1.3e-6 and floor_for("float16") == 1e-3
    assert budget(0.0, "float32", 1) == pytest.approx(GROWTH * 1.3e-6 * 2)  # an exact step 0: rounding only
    assert budget(2e-3, "float32", 3) == pytest.approx(GROWTH * 2e-3 * 4)
    assert budget(2e-3, "float32", 10_000) == CAP


def test_rounding_drift_after_step_0_passes_by_the_budget_and_says_so(reference: Path, tmp_path: Path) -> None:
    strict = compare_with(reference, tmp_path / "strict", ChipRounding(), drift_budget=False)
    assert strict.verdict == "fail"  # strictly, the later steps are not within the tiers
    assert strict.first_divergence is not None and (strict.first_divergence.step or 0) >= 1
    report = compare_with(reference, tmp_path, ChipRounding())
    assert report.verdict in ("pass", "warn"), report.summary  # Adam's update may warn at step 0's param_after
    drift = report.drift
    assert drift is not None and drift.used and drift.over == 0 and drift.step0_failed == 0
    assert 0 < drift.e0 < 1e-3  # step 0 matched within the tiers, by rounding: the budget starts from it
    passed = [t for t in report.tensors if t.tier == "drift_budget"]
    assert passed and all(t.step and t.step >= 1 for t in passed)
    assert all("within the drift budget of step" in t.reason and "strictly:" in t.reason for t in passed)
    assert all(t.tier != "drift_budget" for t in report.tensors if t.step == 0)
    assert "within the drift budget" in report.summary
    assert "later steps within the drift budget (closest" in report.headline()


@pytest.mark.parametrize(("fault", "step"), [(WrongLr(), 1), (WrongGradient(), 1), (OtherActivationFromStep2(), 2)],
                         ids=["wrong-lr", "wrong-gradient", "wrong-op-from-step-2"])
def test_an_injected_fault_is_not_drift(reference: Path, tmp_path: Path, fault: Fault, step: int) -> None:
    report = compare_with(reference, tmp_path, fault)
    assert report.verdict == "fail", report.summary
    if isinstance(fault, WrongGradient):  # the probe records step 0's gradients: caught there, strictly
        assert report.first_divergent_gradient is not None, report.summary
        return
    div = report.first_divergence
    assert div is not None and div.step == step, report.summary
    assert div.inputs == "pass"
    assert "beyond the drift budget" in div.output.reason
    assert "not drift: its relative error" in div.explanation and f"drift budget of step {step}" in div.explanation
    if isinstance(fault, OtherActivationFromStep2):
        assert div.module == "Model.blocks.1.act"  # the module that computes otherwise, not one after it
    assert report.drift is not None and report.drift.over > 0


def test_a_skipped_optimizer_step_fails_even_after_the_recorded_steps(reference: Path, tmp_path: Path) -> None:
    report = compare_with(reference, tmp_path, SkipsStep(STEPS - 1))  # the last step: no tensor of it recorded
    assert report.verdict == "fail"
    row = next(t for t in report.tensors if t.kind == "step_count")
    assert row.verdict == "fail" and f"the reference stepped its optimizer {STEPS} time(s), the target {STEPS - 1}" \
        in row.reason and "skipped" in row.reason
    assert report.first_divergence is not None and report.first_divergence.key == "optimizer:steps"


def test_no_budget_when_step_0_itself_fails(reference: Path, tmp_path: Path) -> None:
    class Step0Off(ChipRounding):
        def prepare(self, model: Model) -> None:
            with torch.no_grad():
                model.head.bias.add_(0.01)

    report = compare_with(reference, tmp_path, Step0Off())
    assert report.verdict == "fail"
    assert report.drift is not None and report.drift.step0_failed > 0
    assert "step 0 itself fails" in (report.drift.note or "")
    assert not any(t.tier == "drift_budget" for t in report.rows())


def test_the_loss_curve_is_judged_by_the_band_of_the_step_each_value_was_printed_at(reference: Path,
                                                                                   tmp_path: Path) -> None:
    report = compare_with(reference, tmp_path, ChipRounding())
    curve = next(t for t in report.scalars if t.key == "scalar:loss")
    # every value is printed after its step's update: the probe placed them at steps 1..STEPS
    from tools.probe.dump import ProbeDump

    assert ProbeDump(reference).scalar_steps["loss"] == list(range(1, STEPS + 1))
    assert curve.verdict == "pass"
    if curve.tier == "drift_budget":
        assert "within the drift band" in curve.reason
    wrong = compare_with(reference, tmp_path / "lr", WrongLr())
    curve = next(t for t in wrong.scalars if t.key == "scalar:loss")
    assert curve.verdict == "fail" and "leaves the drift band at value 1 " in curve.reason


def test_a_program_that_steps_no_optimizer_is_judged_strictly(tmp_path: Path) -> None:
    def run(out: Path, scale: float) -> Path:
        torch.manual_seed(0)
        model = Model()
        with probe_session(out, steps=3), torch.no_grad():
            for i in range(3):
                model(torch.ones(2, 16) * (1 + (scale - 1) * (i >= 1)))
        return out

    report = compare_dumps(run(tmp_path / "a", 1.0), run(tmp_path / "b", 1.001))
    assert report.drift is None  # inference: later calls use the same weights, nothing drifts
    assert report.verdict == "fail"


class PrintsMore(ChipRounding):
    def __init__(self, extra: int) -> None:
        self.extra_losses = extra


def test_a_stream_one_line_longer_is_compared_over_the_common_values_and_says_so(reference: Path,
                                                                                tmp_path: Path) -> None:
    report = compare_with(reference, tmp_path, PrintsMore(1))
    curve = next(t for t in report.scalars if t.key == "scalar:loss")
    assert curve.verdict == "warn", curve.reason  # never a pass: the lengths differ, and the report says so
    assert curve.ref_shape == [STEPS] and curve.target_shape == [STEPS + 1]
    assert f"reference printed {STEPS} values, target {STEPS + 1}; the first {STEPS} compared" in curve.reason
    assert "the 1 unmatched value(s) not judged" in curve.reason
    assert curve.metrics is not None and curve.metrics.numel == STEPS  # measured over the common prefix
    assert report.passed, report.summary
    many = compare_with(reference, tmp_path / "many", PrintsMore(3))
    curve = next(t for t in many.scalars if t.key == "scalar:loss")
    assert curve.verdict == "fail" and "more than a tenth" in curve.reason
