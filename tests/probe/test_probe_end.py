"""FERRY_PROBE_END: the probe ends a program once its recorded steps are done (docs/parity.md, "Steps")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tools.probe.config import ENDED_EXIT_CODE, ENDED_FILE
from tools.probe.dump import ProbeDump
from tools.runner.models import PROBE_ENDED_EXIT_CODE, PROBE_ENDED_FILE

ROOT = Path(__file__).resolve().parents[2]

TRAIN = """
import sys
from tools.probe.child import install_from_env
install_from_env()
import torch
torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
opt = torch.optim.SGD(net.parameters(), lr=0.1)
x, y = torch.randn(16, 4), torch.randn(16, 1)
for step in range({steps}):
    loss = ((net(x) - y) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {{step}} loss={{loss.item():.4f}}", flush=True)
open(sys.argv[1], "w").write("ran to its end")
"""

NO_OPTIMIZER = """
import sys
from tools.probe.child import install_from_env
install_from_env()
import torch
net = torch.nn.Linear(4, 2)
for i in range({steps}):
    net(torch.randn(3, 4))
    print(f"call {{i}}", flush=True)
open(sys.argv[1], "w").write("ran to its end")
"""


def _run(tmp_path: Path, code: str, end: bool, **env: str) -> tuple[subprocess.CompletedProcess[str], Path, Path]:
    probe, done = tmp_path / "probe", tmp_path / "done.txt"
    child_env = {**os.environ, "FERRY_PROBE_DIR": str(probe), "PYTHONPATH": str(ROOT), **env}
    child_env.pop("FERRY_PROBE_END", None)
    if end:
        child_env["FERRY_PROBE_END"] = "1"
    proc = subprocess.run([sys.executable, "-c", code, str(done)], env=child_env, capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    return proc, probe, done


def test_the_probe_and_the_runner_agree_on_how_an_ended_run_looks() -> None:
    assert (ENDED_EXIT_CODE, ENDED_FILE) == (PROBE_ENDED_EXIT_CODE, PROBE_ENDED_FILE)


def test_the_probe_ends_a_200_step_loop_after_its_steps_with_a_complete_dump(tmp_path: Path) -> None:
    proc, probe, done = _run(tmp_path, TRAIN.format(steps=200), end=True)
    assert proc.returncode == ENDED_EXIT_CODE, proc.stderr
    assert not done.exists()  # the program did not run on
    printed = [line for line in proc.stdout.splitlines() if line.startswith("step ")]
    assert 1 <= len(printed) <= 3  # flushed before the end, and only the first steps ran
    marker = json.loads((probe / ENDED_FILE).read_text())
    assert marker["steps"] == 2
    dump = ProbeDump(probe)
    assert dump.meta["closed"] is True and dump.meta["ended_after_steps"] == 2
    steps = {e.get("step") for e in dump.module_calls()}
    assert steps == {0, 1}
    kinds = {e.get("kind") for e in dump.tensor_events.values()}
    assert {"module_output", "grad", "param_after"} <= kinds
    for key in dump.tensor_events:  # every recorded tensor is there to read
        if dump.tensor_events[key].get("chunk"):
            assert dump.tensor(key) is not None
    assert not any(k.startswith("final:") for k in dump.tensor_events)  # a stopped program has no end state


def test_without_the_setting_the_program_runs_to_its_end(tmp_path: Path) -> None:
    proc, probe, done = _run(tmp_path, TRAIN.format(steps=20), end=False)
    assert proc.returncode == 0, proc.stderr
    assert done.exists() and not (probe / ENDED_FILE).exists()


def test_a_program_that_never_reaches_the_step_count_runs_to_its_end(tmp_path: Path) -> None:
    proc, probe, done = _run(tmp_path, NO_OPTIMIZER.format(steps=2), end=True)
    assert proc.returncode == 0, proc.stderr
    assert done.exists() and not (probe / ENDED_FILE).exists()
    assert ProbeDump(probe).meta.get("ended_after_steps") is None


@pytest.mark.parametrize("steps", ["1", "3"])
def test_a_program_without_an_optimizer_is_ended_at_the_call_after_its_steps(tmp_path: Path, steps: str) -> None:
    proc, probe, done = _run(tmp_path, NO_OPTIMIZER.format(steps=50), end=True, FERRY_PROBE_STEPS=steps)
    assert proc.returncode == ENDED_EXIT_CODE, proc.stderr
    assert not done.exists()
    assert ProbeDump(probe).meta["ended_after_steps"] == int(steps)
    assert f"call {int(steps) - 1}" in proc.stdout and f"call {int(steps)}" not in proc.stdout


def test_a_worker_process_is_never_ended(tmp_path: Path) -> None:
    proc, probe, done = _run(tmp_path, TRAIN.format(steps=10), end=True, RANK="1")
    assert proc.returncode == 0, proc.stderr
    assert done.exists() and not (probe / ENDED_FILE).exists()
