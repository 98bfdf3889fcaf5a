"""Gradients and optimizer state: the report names the first divergent gradient (backward order) or, when
the gradients match, the optimizer update; an identical run passes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch.nn as nn

from tests.parity.conftest import Model
from tools.parity.compare import compare_dumps
from tools.parity.models import CheckResult, RunSummary
from tools.parity.render import markdown_report, summary_text
from tools.probe.child import probe_session


def _train(out: Path, *, lr: float = 0.05, probe_steps: int = 2, adam: bool = False,
           prepare: Callable[[Model], None] | None = None) -> Path:
    torch.manual_seed(0)
    model = Model()
    if prepare is not None:
        prepare(model)
    opt: torch.optim.Optimizer = (torch.optim.AdamW(model.parameters(), lr=lr * 0.1) if adam
                                  else torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9))
    gen = torch.Generator().manual_seed(1)
    with probe_session(out, steps=probe_steps):
        for _ in range(3):
            x, y = torch.randn(64, 16, generator=gen), torch.randn(64, 4, generator=gen)
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            opt.zero_grad()
    return out


class _WrongGeluGrad(torch.autograd.Function):
    """GELU whose backward scales the gradient it passes on: a wrong backward of one module."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return nn.functional.gelu(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        with torch.enable_grad():
            x = x.detach().requires_grad_()
            (g,) = torch.autograd.grad(nn.functional.gelu(x), x, grad)
        return g * 1.5


class _WrongGelu(nn.GELU):
    def forward(self, x):
        return _WrongGeluGrad.apply(x)


def _step0_forward_matches(report) -> bool:
    return all(m.output_verdict == "pass" for m in report.modules if m.step == 0)


@pytest.fixture(scope="module")
def sgd_reference(tmp_path_factory) -> Path:
    return _train(tmp_path_factory.mktemp("grads") / "ref")


def test_identical_runs_pass_with_gradients_compared(sgd_reference: Path, tmp_path: Path) -> None:
    report = compare_dumps(sgd_reference, _train(tmp_path / "tgt"))
    assert report.verdict == "pass"
    assert report.first_divergent_gradient is None and report.first_divergent_update is None
    kinds = {t.kind for t in report.tensors}
    assert {"grad", "optim_state", "param_after"} <= kinds
    assert all(t.verdict == "pass" for t in report.tensors if t.kind in ("grad", "optim_state", "param_after"))


def test_a_scaled_gradient_is_named_while_the_forward_pass_matches(sgd_reference: Path, tmp_path: Path) -> None:
    def scale(model: Model) -> None:
        model.blocks[1].fc1.weight.register_hook(lambda g: g * 2)

    report = compare_dumps(sgd_reference, _train(tmp_path / "tgt", prepare=scale))
    assert report.verdict == "fail" and _step0_forward_matches(report)
    found = report.first_divergent_gradient
    assert found is not None
    assert (found.param, found.module, found.step, found.kind, found.rank) == (
        "Model.blocks.1.fc1.weight", "Model.blocks.1.fc1", 0, "grad", 0)
    assert found.failing == 1 and found.comparison.key == "grad:Model.blocks.1.fc1.weight#0"
    assert "first divergent gradient: Model.blocks.1.fc1.weight (step 0, max abs" in report.summary
    # the forward pass of step 1 is the first module to differ; the gradients say why
    div = report.first_divergence
    assert div is not None and div.step == 1
    assert "the forward pass of step 0 matched but its gradients differ: the backward pass differs" in div.explanation
    assert report.first_divergent_update is None  # the gradients already differ


def test_a_wrong_backward_is_localised_in_backward_order(tmp_path: Path) -> None:
    """A module whose backward is wrong corrupts the gradients of every parameter before it in the forward pass:
    the first divergent one, in backward order, is the nearest to the loss (blocks.1.fc1, just before the GELU)."""

    def wrong(model: Model) -> None:
        model.blocks[1].act = _WrongGelu()

    ref = _train(tmp_path / "ref", probe_steps=1)
    report = compare_dumps(ref, _train(tmp_path / "tgt", probe_steps=1, prepare=wrong))
    assert report.verdict == "fail" and _step0_forward_matches(report)
    failing = {t.module for t in report.tensors if t.kind == "grad" and t.verdict == "fail"}
    assert {"Model.embed", "Model.blocks.0.fc1", "Model.blocks.1.fc1"} <= failing
    assert not failing & {"Model.head", "Model.blocks.2.fc1", "Model.blocks.1.fc2"}
    found = report.first_divergent_gradient
    assert found is not None and found.param == "Model.blocks.1.fc1.weight"
    # only step 0 was recorded: the gradient itself is the divergence
    div = report.first_divergence
    assert div is not None and div.key == "grad:Model.blocks.1.fc1.weight#0" and div.module == "Model.blocks.1.fc1"
    assert "the backward pass differs" in div.explanation
    text = summary_text(report)
    assert "first divergent gradient: Model.blocks.1.fc1.weight" in text


@pytest.mark.parametrize("adam", [False, True], ids=["sgd_momentum", "adamw"])
def test_a_wrong_learning_rate_fails_on_the_update(tmp_path: Path, adam: bool) -> None:
    ref = _train(tmp_path / "ref", adam=adam, probe_steps=1)
    report = compare_dumps(ref, _train(tmp_path / "tgt", lr=0.06, adam=adam, probe_steps=1))
    assert report.verdict == "fail" and _step0_forward_matches(report)
    assert all(t.verdict == "pass" for t in report.tensors if t.kind == "grad")
    assert report.first_divergent_gradient is None
    found = report.first_divergent_update
    assert found is not None and found.kind == "param_after" and found.step == 0
    assert found.param == "Model.head.weight"  # nearest to the loss
    # the optimizer state of step 0 does not depend on the learning rate (momentum buffer = grad; Adam's moments)
    assert all(t.verdict == "pass" for t in report.tensors if t.kind == "optim_state")
    assert "gradients match, first divergent optimizer update: Model.head.weight value after the update" in (
        report.summary)
    div = report.first_divergence
    assert div is not None and "the gradients of step 0 matched but the optimizer's update differs" in div.explanation


def test_markdown_report_renders_the_first_divergent_gradient(sgd_reference: Path, tmp_path: Path) -> None:
    def scale(model: Model) -> None:
        model.head.bias.register_hook(lambda g: g * 2)

    report = compare_dumps(sgd_reference, _train(tmp_path / "tgt", prepare=scale))
    run = RunSummary(role="reference", status="ok", exit_code=0, duration_s=1.0)
    md = markdown_report(CheckResult(status="fail", summary=report.summary, out_dir=str(tmp_path), reference=run,
                                     target=run.model_copy(update={"role": "target"}), parity=report))
    assert "## First divergent gradient" in md
    assert "- parameter: `Model.head.bias` (module `Model.head`), optimizer step 0" in md
    assert md.index("## First divergence") < md.index("## First divergent gradient") < md.index("## Modules")
