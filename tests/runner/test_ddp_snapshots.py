"""The DDP tutorial's shape under torchrun (tests/fixtures/ddp_snapshots: nccl, set_device(LOCAL_RANK),
DistributedSampler, a snapshot saved by rank 0 every epoch, destroy_process_group at the end) runs
to its end and exits by itself: on the CPU reference and on tpx with the CUDA redirect (ferry
check's setting), and started warm, with rank 0's own profile."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from sandbox import detect
from tools.runner import warm
from tools.runner.api import run
from tools.runner.models import RunRequest

SAMPLE = Path(__file__).resolve().parents[1] / "fixtures" / "ddp_snapshots"
COMMAND = "torchrun --standalone --nproc_per_node=2 train_ddp.py 2 1"


def _shape(stdout: str) -> list[str]:
    """What the ranks printed, without the losses (tpx computes matmuls in bf16 by default)."""
    lines = re.findall(r"\[GPU\d\] epoch \d steps \d+ loss \d+\.\d+|epoch \d snapshot saved to snapshot.pt", stdout)
    return sorted(re.sub(r"loss \d+\.\d+", "loss _", m) for m in lines)


def test_the_sample_runs_and_exits_on_tpx_under_the_redirect_as_on_the_cpu(tmp_path: Path):
    ref = run(RunRequest(path=SAMPLE, command=COMMAND, device="cpu", redirect_cuda="cpu", probe=True,
                         artifacts_dir=tmp_path / "ref", timeout_s=180))
    assert ref.ok, ref.stderr_tail[-3000:]
    tpx = run(RunRequest(path=SAMPLE, command=COMMAND, device="tpx", redirect_cuda="tpx", probe=True, profile=True,
                         artifacts_dir=tmp_path / "tpx", timeout_s=180))
    # before: both ranks died in backward (torch.cuda.Event was a function, and torch asks isinstance of it)
    assert tpx.ok, (tpx.status, tpx.limit_hit, tpx.stderr_tail[-3000:])
    assert _shape(tpx.stdout_tail) == _shape(ref.stdout_tail)
    assert len(_shape(ref.stdout_tail)) == 6  # 2 epochs x 2 ranks, 2 snapshots


@pytest.mark.skipif("bwrap" not in detect().available, reason="warm runs need bubblewrap")
def test_a_warm_started_torchrun_leaves_rank_zeros_own_profile(tmp_path: Path, monkeypatch):
    monkeypatch.delenv(warm.WARM_ENV, raising=False)
    assert warm.prewarm(seed=0)
    try:
        res = run(RunRequest(path=SAMPLE, command=COMMAND, device="cpu", redirect_cuda="cpu", profile=True,
                             artifacts_dir=tmp_path / "art", timeout_s=180))
    finally:
        warm.shutdown()
    assert res.ok and res.warm_start, (res.warm_fallback, res.stderr_tail[-3000:])
    assert res.profile_dir is not None
    profile = json.loads((res.profile_dir / "profile.json").read_text())
    # before: torchrun's agent, forked warm, took itself for a worker and wrote its empty profile over rank 0's
    assert profile["steps_seen"] > 0
