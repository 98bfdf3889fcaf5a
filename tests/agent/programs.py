"""CUDA programs and migration drivers shared by the agent tests (loaded by file path: the tests use
importlib mode)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from agent.migration.facade import MigrationSnapshot, UnknownMigration

# The codemods fix the placement; the float64 metric needs the offline policy (one fix round).
# It sleeps a second so that a test can kill the migration while a run is going on.
POLICY_PROGRAM = '''import time

import torch

device = torch.device("cuda")


def main():
    x = torch.arange(6, dtype=torch.float32).cuda()
    w = torch.ones(6, device="cuda")
    time.sleep(1.0)
    for step in range(3):
        total = ((x + step) * w).double().sum()
        print(f"step {step} loss {total.item():.6f}")


if __name__ == "__main__":
    main()
'''


def steps(state: MigrationSnapshot) -> list[str]:
    """The nodes a migration's state says have run, in order."""
    return [s.node for s in state.steps]


def migrate_then_kill_9(root: Path, repo: Path, state_dir: Path, mid: str, out: Path,
                        load_state: Callable[[], MigrationSnapshot], env: dict[str, str] | None = None,
                        at_step: str = "apply_fix", wait_s: float = 300.0) -> int:
    """Start ``ferry migrate`` on ``repo`` in its own process group, wait until ``at_step`` is in the
    checkpointed state (``load_state()``), then kill -9 the whole group, mid target run.

    Returns the migration's exit status (``-SIGKILL`` when the kill landed); fails the test when the
    migration ended on its own before it could be killed.
    """
    proc = subprocess.Popen(
        [sys.executable, "-m", "agent.cli", "migrate", str(repo), "--run", "python prog.py", "--json",
         "--state-dir", str(state_dir), "--id", mid, "--out", str(out)],
        cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True, env=env)
    deadline = time.monotonic() + wait_s
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                state = load_state()
            except UnknownMigration:
                state = MigrationSnapshot()
            if at_step in steps(state):
                break
            time.sleep(0.3)
        assert proc.poll() is None, f"migration ended before the kill: {proc.stderr.read().decode()[-2000:]}"
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    return proc.returncode
