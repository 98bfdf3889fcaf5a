"""Distributed jobs in one sandbox: torchrun --standalone and mp.spawn (2 processes, tiny), every
rank's output and trace, the first failing rank, a rendezvous failure, per-rank probe dumps."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest

from tools.runner.api import run
from tools.runner.models import RunRequest

TRAIN = textwrap.dedent("""
    import os, sys, torch, torch.distributed as dist
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    x = torch.randn(8, 4) + rank
    loss = model(x).pow(2).mean()
    loss.backward()
    total = loss.detach().clone()
    dist.all_reduce(total)
    if "--fail" in sys.argv and rank == 1:
        raise ValueError("rank one broke")
    dist.barrier()
    print(f"rank {rank} world {world} devices {os.environ.get('FERRY_REDIRECT_DEVICE_COUNT')} loss {total.item():.6f}",
          flush=True)
    dist.destroy_process_group()
""")

SPAWN = textwrap.dedent("""
    import os, torch, torch.distributed as dist, torch.multiprocessing as mp

    def work(rank, world):
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "localhost", "29517"
        dist.init_process_group("gloo", rank=rank, world_size=world)
        if rank == 1:
            raise RuntimeError("spawned rank one broke")
        dist.barrier()

    if __name__ == "__main__":
        mp.spawn(work, args=(2,), nprocs=2)
""")

RENDEZVOUS = textwrap.dedent("""
    import datetime, torch.distributed as dist
    dist.init_process_group("gloo", init_method="tcp://no-such-host.invalid:29511", rank=0, world_size=2,
                            timeout=datetime.timedelta(seconds=2))
""")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    src = tmp_path / "repo"
    src.mkdir()
    (src / "train.py").write_text(TRAIN)
    (src / "spawn_job.py").write_text(SPAWN)
    (src / "rdzv.py").write_text(RENDEZVOUS)
    return src


def _run(repo: Path, cmd: str, tmp_path: Path, **kw):
    kw.setdefault("device", "cpu")
    return run(RunRequest(path=repo, command=cmd, artifacts_dir=tmp_path / "art", timeout_s=120, **kw))


def test_torchrun_standalone_runs_inside_one_sandbox(repo: Path, tmp_path: Path):
    res = _run(repo, "torchrun --standalone --nproc-per-node 2 train.py", tmp_path, redirect_cuda="cpu", probe=True)
    assert res.status == "ok", res.stderr_tail
    # found anywhere: the ranks share one unbuffered stdout, where print writes the text and its newline
    # apart, so one rank's line may run into another's
    lines = sorted(re.findall(r"rank (\d) world (\d) devices (\d+) loss (\d+\.\d{6})", res.stdout_tail))
    assert [x[:3] for x in lines] == [("0", "2", "2"), ("1", "2", "2")], (res.stdout_tail, res.stderr_tail[-2000:])
    assert len({x[3] for x in lines}) == 1  # the all-reduced loss agrees
    # rank 0's probe dump is the run's; rank 1's is beside it; the launcher wrote none over them
    assert res.probe_dir is not None
    main = json.loads((res.probe_dir / "index.json").read_text())
    other = json.loads((res.probe_dir / "rank-1" / "index.json").read_text())
    assert main["meta"]["env"].get("FERRY_PROBE_DIR", "").endswith("probe")
    assert main["module_ops"] and other["module_ops"]
    assert main["meta"]["pid"] != other["meta"]["pid"]


def test_the_first_failing_rank_is_reported_not_the_launcher(repo: Path, tmp_path: Path):
    res = _run(repo, "python -m torch.distributed.run --standalone --nproc_per_node=2 train.py --fail", tmp_path)
    assert res.status == "failed"
    trace = res.trace
    assert trace is not None
    assert trace.rank == 1 and 1 in trace.failed_ranks
    assert trace.exc_type == "ValueError" and trace.message == "rank one broke"
    assert trace.wrapped_by is not None and trace.wrapped_by.endswith("ChildFailedError")
    assert trace.location == "train.py:13"


def test_mp_spawn_failure_names_the_process(repo: Path, tmp_path: Path):
    res = _run(repo, "python spawn_job.py", tmp_path, probe=True)
    assert res.status == "failed"
    trace = res.trace
    assert trace is not None and trace.rank == 1
    assert trace.exc_type == "RuntimeError" and "spawned rank one broke" in trace.message
    assert trace.location is not None and trace.location.startswith("spawn_job.py:")
    # each spawned process probes under its own rank; the parent, which only launched them, wrote nothing
    assert res.probe_dir is not None and (res.probe_dir / "rank-1" / "index.json").is_file()
    main = json.loads((res.probe_dir / "index.json").read_text())
    assert main["meta"]["pid"] != json.loads((res.probe_dir / "rank-1" / "index.json").read_text())["meta"]["pid"]


def test_a_rendezvous_failure_is_the_environment(repo: Path, tmp_path: Path):
    res = _run(repo, "python rdzv.py", tmp_path)
    assert res.status == "failed"
    assert res.trace is not None and res.trace.signature.kind == "rendezvous", res.stderr_tail
    assert "cause:" in (res.trace.signature.detail or "")
