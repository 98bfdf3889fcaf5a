"""Parity on an evidence run the probe ended after its recorded steps (FERRY_PROBE_END): only what it
recorded is compared, nothing it could not have is counted missing (docs/parity.md, "Steps")."""

from __future__ import annotations

from pathlib import Path

import torch

from tools.parity.compare import compare_dumps
from tools.probe.child import probe_session


def _train(out: Path, steps: int, ended: bool, scale: float = 1.0) -> None:
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    with probe_session(out, steps=2) as session:
        for step in range(steps):
            loss = ((net(x * scale) - y) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            print(f"step {step} loss={loss.item():.6f}")
        torch.save(net.state_dict(), out.parent / f"{out.name}-weights.pt")
        if ended:  # what the probe writes when it ends the program after its steps
            session.recorder.meta["ended_after_steps"] = 2


def test_an_ended_target_is_compared_on_its_recorded_steps_only(tmp_path: Path) -> None:
    _train(tmp_path / "ref", steps=40, ended=False)
    _train(tmp_path / "tgt", steps=2, ended=True)
    report = compare_dumps(tmp_path / "ref", tmp_path / "tgt")
    assert report.passed, report.summary
    assert not report.missing_in_target and not report.scalars
    assert {t.kind for t in report.tensors} <= {"module_input", "module_output", "grad", "optim_state", "param_after"}
    assert any(t.kind == "grad" for t in report.tensors)
    assert any("ended by the probe after its 2 recorded step(s)" in n for n in report.notes)


def test_the_same_dump_not_marked_ended_is_judged_as_a_whole_run(tmp_path: Path) -> None:
    _train(tmp_path / "ref", steps=40, ended=False)
    _train(tmp_path / "tgt", steps=2, ended=False)
    report = compare_dumps(tmp_path / "ref", tmp_path / "tgt")
    assert report.failed  # a run that printed 2 of 40 losses is not a whole run


def test_an_ended_target_that_computes_something_else_still_fails(tmp_path: Path) -> None:
    _train(tmp_path / "ref", steps=40, ended=False)
    _train(tmp_path / "tgt", steps=2, ended=True, scale=1.5)
    report = compare_dumps(tmp_path / "ref", tmp_path / "tgt")
    assert report.failed and report.first_divergence is not None
