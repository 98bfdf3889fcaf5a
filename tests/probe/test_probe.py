"""The probe records module calls, inputs, scalars and explicit records, within its bounds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn as nn

import tools.probe as probe
from tools.probe.child import probe_session
from tools.probe.config import ProbeConfig, config_from_env
from tools.probe.dump import DumpError, ProbeDump
from tools.probe.scalars import parse_scalars

REPO = Path(__file__).resolve().parents[2]


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(6, 6)
        self.norm = nn.LayerNorm(6)

    def forward(self, x):
        return self.norm(torch.relu(self.fc(x))) + x


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(4, 6)
        self.blocks = nn.ModuleList([Block(), Block()])
        self.head = nn.Linear(6, 2)

    def forward(self, x):
        x = self.inp(x)
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def _train(steps: int) -> list[float]:
    torch.manual_seed(0)
    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    losses = []
    for _ in range(steps):
        loss = net(torch.randn(5, 4)).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses


def test_records_module_outputs_by_path_and_call_index(tmp_path: Path) -> None:
    with probe_session(tmp_path, steps=2):
        _train(4)
    dump = ProbeDump(tmp_path)
    ends = [e["key"] for e in dump.module_calls()]
    # completion order: innermost first; two steps recorded, then the hooks removed themselves
    assert ends[:6] == ["Net.inp#0", "Net.blocks.0.fc#0", "Net.blocks.0.norm#0", "Net.blocks.0#0",
                        "Net.blocks.1.fc#0", "Net.blocks.1.norm#0"]
    assert "Net#1" in ends and "Net#2" not in ends
    assert {e["step"] for e in dump.module_calls()} == {0, 1}
    assert dump.module_classes["Net.blocks.1.norm"] == "LayerNorm"
    out = dump.tensor("Net.blocks.0.fc#1:out")
    assert out.shape == (5, 6) and out.dtype == torch.float32
    assert "linear" in dump.module_ops["Net.blocks.0.fc"]
    assert "layer_norm" in dump.module_ops["Net.blocks.0.norm"]
    # the probe's own copies are not counted as the model's ops
    assert "clone" not in dump.module_ops.get("Net", [])
    # optimizer steps are counted while recording; the hook goes away with the others
    assert dump.meta["closed"] is True and dump.meta["optimizer_steps"] == 2


def test_inputs_recorded_and_deduplicated_against_earlier_outputs(tmp_path: Path) -> None:
    with probe_session(tmp_path, steps=1):
        _train(1)
    dump = ProbeDump(tmp_path)
    ev = dump.tensor_events["Net.blocks.0#0:in[0]"]
    assert ev["same_as"] == "Net.inp#0:out"
    assert torch.equal(dump.tensor("Net.blocks.0#0:in[0]"), dump.tensor("Net.inp#0:out"))
    # the root's input is real data, stored once
    assert "chunk" in dump.tensor_events["Net#0:in[0]"]


def test_recorded_values_are_copies_not_views(tmp_path: Path) -> None:
    lin = nn.Linear(3, 3)
    x = torch.ones(2, 3)
    with probe_session(tmp_path, steps=1):
        y = lin(x)
        expected = y.detach().clone()
        y.detach().add_(100.0)  # the program mutates the output afterwards
    assert torch.equal(ProbeDump(tmp_path).tensor("Linear#0:out"), expected)


def test_byte_budget_bounds_the_dump(tmp_path: Path) -> None:
    budget = 600
    with probe_session(tmp_path, steps=3, max_bytes=budget):
        _train(3)
    dump = ProbeDump(tmp_path)
    assert 0 < dump.meta["bytes_written"] <= budget
    skipped = [e for e in dump.events if "budget" in e.get("skipped", "")]
    assert skipped and dump.meta["dropped_events"] == len(skipped)
    assert dump.tensor(skipped[0]["key"]) is None
    data = sum(p.stat().st_size for p in tmp_path.glob("chunk_*.pt"))
    assert data < budget + 4096 * len(list(tmp_path.glob("chunk_*.pt")))


def test_steps_zero_records_no_module_calls(tmp_path: Path) -> None:
    with probe_session(tmp_path, steps=0):
        _train(2)
    assert ProbeDump(tmp_path).module_calls() == []


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("loss 2.31", [("loss", 2.31)]),
        ("step 10 | loss: 2.31", [("loss", 2.31)]),
        ("epoch 1 train_loss=0.5 time 0.3s acc: 91.2%", [("train_loss", 0.5), ("acc", 91.2)]),
        ("val/loss 1e-3 lr 0.1 12.5 it/s", [("val/loss", 0.001), ("lr", 0.1)]),
        ("nothing to see 3.0", []),
        # a warning's location is not a metric, whatever its sandbox path holds ("f1", "kl", "auc")
        ("/tmp/ferry-space-1-2-n3-4030aaf1/ws/repo/train.py:30: UserWarning: x", []),
        ("./kl_div.py:12: DeprecationWarning loss 0.5", [("loss", 0.5)]),
        ("src/auc_metric.py:7", []),
        ("train/loss: 0.25", [("train/loss", 0.25)]),
    ],
)
def test_scalar_pattern(line: str, expected: list) -> None:
    import re

    pattern = re.compile(ProbeConfig(out_dir=Path(".")).scalar_pattern)
    assert parse_scalars(line, pattern) == expected


def test_scalar_stream_captured_from_stdout(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    with probe_session(tmp_path, steps=0):
        for i, loss in enumerate([2.5, 1.25, 0.625]):
            print(f"step {i} | loss: {loss}")
        sys.stdout.write("loss 0.3")  # no newline: flushed at close
    assert ProbeDump(tmp_path).scalars == {"loss": [2.5, 1.25, 0.625, 0.3]}
    assert "step 2 | loss: 0.625" in capsys.readouterr().out  # output still reaches the user


def test_config_from_env_and_bad_pattern(tmp_path: Path) -> None:
    assert config_from_env({}) is None
    cfg = config_from_env({"FERRY_PROBE_DIR": str(tmp_path), "FERRY_PROBE_STEPS": "5",
                           "FERRY_PROBE_MAX_BYTES": "1_000", "FERRY_PROBE_SCALAR_PATTERN": r"ppl=(?P<value>\S+)"})
    assert (cfg.steps, cfg.max_bytes, cfg.out_dir) == (5, 1000, tmp_path)
    assert config_from_env({"FERRY_PROBE_DIR": "d", "FERRY_PROBE_MAX_BYTES": "1e8"}).max_bytes == 100_000_000
    with pytest.raises(ValueError, match="named group"):
        config_from_env({"FERRY_PROBE_DIR": str(tmp_path), "FERRY_PROBE_SCALAR_PATTERN": r"loss (\d+)"})


def test_record_is_noop_outside_and_records_inside(tmp_path: Path) -> None:
    assert not probe.is_active()
    probe.record("outside", torch.ones(3))  # no error, nothing written anywhere
    with probe_session(tmp_path, steps=0):
        assert probe.is_active()
        probe.record("h", torch.arange(3.0))
        probe.record("h", torch.arange(3.0) * 2)
        probe.record("lr", 0.125)
    dump = ProbeDump(tmp_path)
    assert torch.equal(dump.tensor("record:h#1"), torch.tensor([0.0, 2.0, 4.0]))
    assert dump.tensor("record:lr#0").item() == 0.125
    assert not (tmp_path / "outside").exists()


def test_not_a_dump_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(DumpError, match="not a probe dump"):
        ProbeDump(tmp_path)


CHILD = """
import torch, torch.nn as nn
from tools.probe.child import install_from_env
install_from_env()
torch.manual_seed(0)
m = nn.Linear(3, 2)
for i in range(3):
    print(f"step {i} loss {float(m(torch.ones(1, 3)).sum()):.4f}", flush=True)
raise SystemExit("boom: crashed after printing")
"""


def test_install_from_env_in_a_child_survives_a_crash(tmp_path: Path) -> None:
    dump_dir = tmp_path / "dump"
    env = {**os.environ, "FERRY_PROBE_DIR": str(dump_dir), "FERRY_PROBE_STEPS": "2", "PYTHONPATH": str(REPO),
           "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
    proc = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "boom" in proc.stderr
    assert proc.stdout.count("loss") == 3
    index = json.loads((dump_dir / "index.json").read_text())
    assert index["meta"]["closed"] is True
    assert len(index["scalars"]["loss"]) == 3
    assert [e["key"] for e in index["events"] if e["kind"] == "module_end"] == ["Linear#0", "Linear#1"]


def test_compiled_model_is_probed_at_its_boundary_without_breaking(tmp_path: Path) -> None:
    torch.manual_seed(0)
    net = Net()
    expected = net(torch.ones(2, 4)).detach()
    compiled = torch.compile(net, backend="eager")
    with probe_session(tmp_path, steps=1):
        out = compiled(torch.ones(2, 4))
    assert torch.allclose(out, expected)
    dump = ProbeDump(tmp_path)
    # the compiled region is opaque: its outermost call is recorded, traced inner calls are not
    outer = [e for e in dump.module_calls() if e["call"] == 0]
    assert outer and torch.allclose(dump.tensor(f"{outer[-1]['module']}#0:out"), expected)
