"""The probe's bounds: a sampling loop inside a step, the byte budget and the event cap stop the
recording (the run goes on unprobed), and parity compares what both runs recorded (issue 18)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn as nn

from tools.parity.compare import compare_dumps
from tools.probe import recorder as probe_recorder
from tools.probe.child import probe_session
from tools.probe.config import DEFAULT_CALLS_PER_STEP, config_from_env
from tools.probe.dump import ProbeDump


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 4))


def _train_with_sampling(steps: int = 3, samples: int = 30) -> None:
    """chargpt's pattern: after the first optimizer step, many no-grad eval forwards in one step."""
    net = _net()
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    for it in range(steps):
        loss = net(torch.randn(5, 4)).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        if it == 0:
            net.eval()
            with torch.no_grad():
                x = torch.randn(1, 4)
                for _ in range(samples):
                    x = net(x).tanh()
            net.train()


def test_sampling_loop_inside_a_step_records_only_a_few_calls(tmp_path: Path, monkeypatch) -> None:
    writes = []
    original = probe_recorder.Recorder._write_index
    monkeypatch.setattr(probe_recorder.Recorder, "_write_index", lambda self: (writes.append(1), original(self)))
    with probe_session(tmp_path, steps=2, calls_per_step=2) as session:
        _train_with_sampling(samples=30)
    dump = ProbeDump(tmp_path)
    roots = [(e["key"], e["step"]) for e in dump.module_calls() if e["module"] == "Sequential"]
    # step 0: the training call; step 1: two of the 30 sampling calls, then step 1's training call
    assert roots == [("Sequential#0", 0), ("Sequential#1", 1), ("Sequential#2", 1), ("Sequential#3", 1)]
    assert dump.meta["unrecorded_root_calls"] == 28
    assert session.modules.finished and "stopped" not in dump.meta
    # the index is rewritten per recorded call and step, not per forward of the sampling loop
    assert len(writes) <= 12
    # the sampled forwards that were recorded hold their data
    assert dump.tensor("Sequential#2:out").shape == (1, 4)


def test_byte_budget_stops_recording_and_removes_the_hooks(tmp_path: Path) -> None:
    with probe_session(tmp_path, steps=3, max_bytes=600) as session:
        _train_with_sampling(samples=3)
        assert session.modules.finished  # hooks gone while the program still runs
    dump = ProbeDump(tmp_path)
    assert "byte budget" in dump.meta["stopped"] and "600" in dump.meta["stopped"]
    assert 0 < dump.meta["bytes_written"] <= 600
    # the event that did not fit is the last one: nothing is appended after the stop
    assert "budget" in dump.events[-1]["skipped"]
    assert dump.meta["dropped_events"] == 1


def test_event_cap_stops_recording(tmp_path: Path) -> None:
    with probe_session(tmp_path, steps=2, max_events=7) as session:
        _train_with_sampling(samples=3)
    dump = ProbeDump(tmp_path)
    assert len(dump.events) == 7
    assert "event cap" in dump.meta["stopped"] and dump.meta["stopped_at_seq"] == 7
    assert session.modules.finished


def test_parity_compares_what_a_stopped_target_recorded(tmp_path: Path) -> None:
    with probe_session(tmp_path / "ref", steps=2):
        _train_with_sampling(samples=3)
    with probe_session(tmp_path / "tgt", steps=2, max_events=9):
        _train_with_sampling(samples=3)
    report = compare_dumps(tmp_path / "ref", tmp_path / "tgt")
    assert report.verdict == "pass", report.summary
    assert report.missing_in_target == []
    not_recorded = [t for t in report.tensors if t.tier == "not_recorded"]
    assert not_recorded and all("probe stopped" in t.reason for t in not_recorded)
    assert any("stopped recording early" in n for n in report.notes)
    passed = [t for t in report.tensors if t.verdict == "pass"]
    assert passed and passed[0].key == "Sequential#0:in[0]"


def test_a_key_missing_before_the_target_stopped_still_fails(tmp_path: Path) -> None:
    with probe_session(tmp_path / "ref", steps=1):
        _net()(torch.ones(2, 4))
    torch.manual_seed(0)
    other = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 4))  # a different path: no third module
    with probe_session(tmp_path / "tgt", steps=1, max_events=8) as session:
        other(torch.ones(2, 4))
    assert session.recorder.stopped is not None
    report = compare_dumps(tmp_path / "ref", tmp_path / "tgt")
    assert report.verdict == "fail"
    # recorded in the reference before the target's stop point: missing, not excused by the stop
    assert "Sequential.2#0:in[0]" in report.missing_in_target


@pytest.mark.parametrize(("raw", "expected"),
                         [("3", 3), ("0", DEFAULT_CALLS_PER_STEP), ("many", DEFAULT_CALLS_PER_STEP)])
def test_calls_per_step_from_env(tmp_path: Path, raw: str, expected: int, caplog) -> None:
    cfg = config_from_env({"FERRY_PROBE_DIR": str(tmp_path), "FERRY_PROBE_CALLS_PER_STEP": raw,
                           "FERRY_PROBE_MAX_EVENTS": "50"})
    assert cfg is not None and cfg.calls_per_step == expected and cfg.max_events == 50
    if raw != "3":
        assert f"FERRY_PROBE_CALLS_PER_STEP={raw!r} is not an integer >= 1" in caplog.text


def test_forwards_under_inference_mode_are_recorded(tmp_path: Path) -> None:
    # Lightning runs validate/test under torch.inference_mode: its tensors have no version counter,
    # which the probe's deduplication read (RuntimeError in the user's test loop)
    net = _net()
    with probe_session(tmp_path, steps=3, calls_per_step=4):
        net(torch.randn(3, 4)).sum().backward()
        with torch.inference_mode():
            x = torch.randn(2, 4)
            first = net(x)
            x.add_(1.0)  # changed in place: the same tensor object must be recorded again, not deduplicated
            second = net(x)
    assert not torch.equal(first, second)
    dump = ProbeDump(tmp_path)
    inputs = {e["key"]: e for e in dump.events if e["key"].startswith("Sequential#") and e["key"].endswith(":in[0]")}
    assert list(inputs) == ["Sequential#0:in[0]", "Sequential#1:in[0]", "Sequential#2:in[0]"]
    assert "same_as" not in inputs["Sequential#2:in[0]"]
    assert torch.equal(dump.tensor("Sequential#2:in[0]"), x)
    assert torch.allclose(dump.tensor("Sequential#1:in[0]"), x - 1.0)
