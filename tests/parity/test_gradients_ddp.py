"""A distributed run's gradients are compared rank by rank: a skipped all-reduce fails on the ranks' gradients."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tools.parity.compare import compare_dumps
from tools.probe.dump import ProbeDump

WORKER = Path(__file__).with_name("_ddp_grads_worker.py")
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ddp_runs(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ddp_grads")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, str(WORKER), f"tcp://127.0.0.1:{port}", str(out)],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return out


def test_an_identical_ddp_run_passes_on_every_rank(ddp_runs: Path) -> None:
    report = compare_dumps(ddp_runs / "ref", ddp_runs / "same")
    assert report.verdict == "pass" and report.first_divergent_gradient is None
    assert [(r.rank, r.failing) for r in report.gradient_ranks] == [(0, 0), (1, 0)]
    assert report.gradient_ranks[1].compared == 8  # 4 gradients and 4 parameters after step 0 (SGD keeps no state)
    assert "grad:DistributedDataParallel.module.2.weight#0" in {t.key for t in report.tensors}


def test_a_skipped_all_reduce_fails_on_the_ranks_gradients(ddp_runs: Path) -> None:
    report = compare_dumps(ddp_runs / "ref", ddp_runs / "nosync")
    assert report.verdict == "fail"
    assert all(m.output_verdict == "pass" for m in report.modules if m.step == 0)
    found = report.first_divergent_gradient
    assert found is not None and found.rank == 0 and found.step == 0
    assert found.param == "DistributedDataParallel.module.2.weight"
    assert [(r.rank, r.failing > 0) for r in report.gradient_ranks] == [(0, True), (1, True)]
    assert "the backward pass differs" in report.first_divergence.explanation


def test_a_gradient_wrong_on_one_rank_names_that_rank(ddp_runs: Path) -> None:
    report = compare_dumps(ddp_runs / "ref", ddp_runs / "rank1")
    assert report.verdict == "fail"  # rank 0's tensors all pass: rank 1's gradients fail the report
    assert all(t.verdict == "pass" for t in report.tensors)
    found = report.first_divergent_gradient
    assert found is not None and (found.rank, found.param) == (1, "DistributedDataParallel.module.2.bias")
    assert report.summary.startswith("the target's gradients differ on rank(s) 1; ")
    assert "first divergent gradient: DistributedDataParallel.module.2.bias (step 0, rank 1" in report.summary
    assert any(n.startswith("gradients and optimizer state, rank 1: ") and "differ" in n for n in report.notes)


def test_fsdp2_records_each_ranks_local_shard(ddp_runs: Path) -> None:
    for rank_dir in (ddp_runs / "fsdp", ddp_runs / "fsdp" / "rank-1"):
        dump = ProbeDump(rank_dir)
        for key in ("grad:FSDPSequential.0.weight#0", "optim:FSDPSequential.0.weight.exp_avg#0",
                    "param:FSDPSequential.0.weight#0"):
            ev = dump.tensor_events[key]
            assert ev["shape"] == [8, 8]  # half of the [16, 8] weight
            assert ev["dtensor"].startswith("local shard of a DTensor") and "global shape [16, 8]" in ev["dtensor"]
    report = compare_dumps(ddp_runs / "fsdp", ddp_runs / "fsdp")
    assert [(r.rank, r.compared > 0, r.failing) for r in report.gradient_ranks] == [(0, True, 0), (1, True, 0)]
