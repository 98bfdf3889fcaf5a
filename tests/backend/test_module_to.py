"""``Module.to("tpx")`` keeps its Parameter objects, as CPU -> CUDA does (issue 18).

Without this an optimizer built before ``model.to("tpx")`` holds the stale CPU parameters and
trains nothing (under GradScaler: "No inf checks were recorded for this optimizer").
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

MOVES: dict[str, Callable[[nn.Module], nn.Module]] = {
    "to_str": lambda m: m.to("tpx"),
    "to_str_index": lambda m: m.to("tpx:0"),
    "to_device": lambda m: m.to(torch.device("tpx", 0)),
    "tpx_method": lambda m: m.tpx(),
    "to_device_and_dtype": lambda m: m.to("tpx", torch.float32),
}


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 16), nn.LayerNorm(16), nn.ReLU(), nn.Linear(16, 1))


def test_compatible_shallow_copy_type_cpu_and_tpx():
    cpu, tpx = torch.zeros(3), torch.zeros(3, device="tpx")
    assert torch._has_compatible_shallow_copy_type(cpu, tpx)
    assert torch._has_compatible_shallow_copy_type(tpx, cpu)
    assert torch._has_compatible_shallow_copy_type(tpx, torch.ones(2, 2, device="tpx"))
    # not dense on both sides: still incompatible, as for CUDA
    assert not torch._has_compatible_shallow_copy_type(tpx, torch.zeros(3).to_sparse())
    assert not torch._has_compatible_shallow_copy_type(tpx, torch.zeros(3, device="meta"))


@pytest.mark.parametrize("move", sorted(MOVES))
def test_module_to_tpx_keeps_parameters_and_grads(move):
    model = _model()
    model(torch.randn(4, 6)).sum().backward()
    params = list(model.parameters())
    grads = [p.grad.clone() for p in params]
    out = MOVES[move](model)
    assert out is model
    moved = list(model.parameters())
    assert all(a is b for a, b in zip(moved, params, strict=True))
    assert all(isinstance(p, nn.Parameter) and p.requires_grad for p in moved)
    assert {p.device.type for p in moved} == {"tpx"}
    assert {p.grad.device.type for p in moved} == {"tpx"}
    for p, g in zip(moved, grads, strict=True):
        assert torch.equal(p.grad.cpu(), g)
    model.cpu()  # and back
    assert all(a is b for a, b in zip(model.parameters(), params, strict=True))
    assert {p.device.type for p in params} == {"cpu"}
    assert {p.grad.device.type for p in params} == {"cpu"}


def _fit(model: nn.Module, opt: torch.optim.Optimizer, scaler: torch.amp.GradScaler | None) -> list[float]:
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(32, 6, generator=gen)
    y = x.sum(dim=1, keepdim=True)
    x, y = x.to("tpx"), y.to("tpx")
    losses = []
    for _ in range(8):
        opt.zero_grad()
        if scaler is None:
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
        else:
            with torch.autocast("tpx", dtype=torch.float16):
                loss = nn.functional.mse_loss(model(x), y)
            scaler.scale(loss).backward()
            scaler.step(opt)  # raises "No inf checks were recorded" when opt holds stale parameters
            scaler.update()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("scaled", [False, True], ids=["plain", "grad_scaler"])
def test_optimizer_built_before_to_trains_the_model(scaled):
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)  # built on the CPU parameters
    before = [p.detach().clone() for p in model.parameters()]
    ids = [id(p) for p in model.parameters()]
    model.to("tpx")
    scaler = torch.amp.GradScaler("tpx", init_scale=256.0) if scaled else None
    losses = _fit(model, opt, scaler)
    assert [id(p) for p in model.parameters()] == ids
    assert all(p is q for p, q in zip(opt.param_groups[0]["params"], model.parameters(), strict=True))
    assert losses[-1] < 0.5 * losses[0], losses
    changed = [not torch.equal(p.detach().cpu(), b) for p, b in zip(model.parameters(), before, strict=True)]
    assert all(changed)
