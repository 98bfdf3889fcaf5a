"""The probe records gradients before, and optimizer state and parameters after, each optimizer's first steps."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn as nn

from tools.probe.child import probe_session
from tools.probe.config import config_from_env
from tools.probe.dump import ProbeDump


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.head = nn.Linear(3, 2)

    def forward(self, x):
        return self.head(torch.tanh(self.fc(x)))


def _kinds(dump: ProbeDump) -> dict[str, str]:
    return {k: e["kind"] for k, e in dump.tensor_events.items() if e["kind"] in ("grad", "optim_state", "param_after")}


def test_sgd_momentum_records_grads_state_and_updated_params(tmp_path: Path) -> None:
    torch.manual_seed(0)
    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    before = net.fc.weight.detach().clone()
    with probe_session(tmp_path, steps=2):
        for i in range(3):
            net(torch.randn(5, 4)).pow(2).mean().backward()
            if i == 0:
                grad = net.fc.weight.grad.detach().clone()
            opt.step()
            if i == 0:
                after = net.fc.weight.detach().clone()
            opt.zero_grad()
    dump = ProbeDump(tmp_path)
    kinds = _kinds(dump)
    # FERRY_PROBE_GRAD_STEPS defaults to 1: the first optimizer step only
    assert kinds == {
        **{f"grad:Net.{m}.{p}#0": "grad" for m in ("fc", "head") for p in ("weight", "bias")},
        **{f"optim:Net.{m}.{p}.momentum_buffer#0": "optim_state" for m in ("fc", "head") for p in ("weight", "bias")},
        **{f"param:Net.{m}.{p}#0": "param_after" for m in ("fc", "head") for p in ("weight", "bias")},
    }
    ev = dump.tensor_events["grad:Net.fc.weight#0"]
    assert (ev["step"], ev["module"], ev["param"], ev["optimizer"]) == (0, "Net.fc", "Net.fc.weight", "SGD")
    assert torch.equal(dump.tensor("grad:Net.fc.weight#0"), grad)
    assert torch.equal(dump.tensor("optim:Net.fc.weight.momentum_buffer#0"), grad)
    assert torch.equal(dump.tensor("param:Net.fc.weight#0"), after)
    assert torch.allclose(after, before - 0.1 * grad)


def test_adam_state_and_two_optimizers_get_distinct_names(tmp_path: Path) -> None:
    """A GAN's two optimizers: parameters named by their own outermost module; parameters no recorded module
    owns by the optimizer, the second optimizer of a class with a suffix."""
    torch.manual_seed(0)
    gen, disc = nn.Sequential(nn.Linear(2, 4)), Net()
    extra_g, extra_d = nn.Parameter(torch.ones(3)), nn.Parameter(torch.ones(3))
    opt_g = torch.optim.Adam([*gen.parameters(), extra_g], lr=1e-2)
    opt_d = torch.optim.AdamW([*disc.parameters(), extra_d], lr=1e-2)
    opt_x = torch.optim.Adam([nn.Parameter(torch.zeros(2))], lr=1e-2)
    with probe_session(tmp_path, steps=2, grad_steps=2):
        for _ in range(3):
            (disc(gen(torch.randn(5, 2))).sum() + extra_d.sum()).backward()
            opt_d.step()
            (gen(torch.randn(5, 2)).pow(2).mean() + extra_g.sum()).backward()
            opt_g.step()
            opt_x.step()  # no gradient: nothing but its parameter after the step
            opt_g.zero_grad()
            opt_d.zero_grad()
    kinds = _kinds(ProbeDump(tmp_path))
    for n in (0, 1):
        assert {f"grad:Sequential.0.weight#{n}", f"grad:Net.fc.weight#{n}", f"grad:Adam.param_groups.0.2#{n}",
                f"grad:AdamW.param_groups.0.4#{n}"} <= set(kinds)
        for state in ("step", "exp_avg", "exp_avg_sq"):
            assert kinds[f"optim:Sequential.0.weight.{state}#{n}"] == "optim_state"
            assert kinds[f"optim:Net.head.bias.{state}#{n}"] == "optim_state"
        assert kinds[f"param:Adam_1.param_groups.0.0#{n}"] == "param_after"
    assert not any(k.endswith("#2") for k in kinds)
    assert not any(k.startswith("grad:Adam_1") for k in kinds)


def test_grad_steps_zero_and_compiling_record_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def run(out: Path, **settings) -> dict[str, str]:
        net = Net()
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        with probe_session(out, steps=1, **settings):
            net(torch.randn(2, 4)).sum().backward()
            opt.step()
        return _kinds(ProbeDump(out))

    assert run(tmp_path / "on")
    assert run(tmp_path / "off", grad_steps=0) == {}
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    assert run(tmp_path / "compiling") == {}


def test_grad_steps_setting_from_env(tmp_path: Path) -> None:
    env = {"FERRY_PROBE_DIR": str(tmp_path)}
    assert config_from_env(env).grad_steps == 1
    assert config_from_env({**env, "FERRY_PROBE_GRAD_STEPS": "3"}).grad_steps == 3
    assert config_from_env({**env, "FERRY_PROBE_GRAD_STEPS": "-1"}).grad_steps == 1  # warned, default kept


def test_gradients_count_against_the_byte_budget(tmp_path: Path) -> None:
    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    with probe_session(tmp_path, steps=0, max_bytes=60):
        net(torch.randn(2, 4)).sum().backward()
        opt.step()
    dump = ProbeDump(tmp_path)
    assert dump.meta["stopped"].startswith("byte budget")
    assert dump.meta["bytes_written"] <= 60
    assert any("budget" in e.get("skipped", "") for e in dump.events if e["kind"] == "grad")
