"""2-process gloo DDP runs for tests/parity/test_gradients_ddp.py (run as a script, ranks forked).

``python _ddp_grads_worker.py URL OUT``: each rank trains the same small model on its own data three
times, probed, into ``OUT/<run>`` (rank 0) and ``OUT/<run>/rank-1``, as the runner's bootstrap lays out a
distributed run's dumps: ``ref`` and ``same`` (DDP), ``nosync`` (DDP under ``no_sync()``: the all-reduce is skipped,
each rank steps with its local gradients), ``rank1`` (DDP, then rank 1 alone doubles one gradient) and
``fsdp`` (FSDP2's ``fully_shard``, Adam: DTensor parameters, gradients and state).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from tools.probe.child import probe_session

WORLD = 2


def _train(out: Path, rank: int, variant: str) -> None:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4))
    if variant == "fsdp":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        # on the CPU: with tpx installed, FSDP2 would pick the accelerator as its default device
        model: nn.Module = fully_shard(net, mesh=init_device_mesh("cpu", (WORLD,)))
        opt: torch.optim.Optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    else:
        model = DDP(net)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(100 + rank)  # each rank its own shard of the data
    with probe_session(out if rank == 0 else out / f"rank-{rank}", steps=2):
        for _ in range(2):
            x, y = torch.randn(16, 8, generator=gen), torch.randn(16, 4, generator=gen)
            if variant == "nosync":
                with model.no_sync():  # type: ignore[operator]
                    nn.functional.mse_loss(model(x), y).backward()
            else:
                nn.functional.mse_loss(model(x), y).backward()
            if variant == "rank1" and rank == 1:
                model.module[2].bias.grad.mul_(2)  # type: ignore[index]
            opt.step()
            opt.zero_grad()


def worker(rank: int, url: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=url, rank=rank, world_size=WORLD)
    try:
        for variant in ("ref", "same", "nosync", "rank1", "fsdp"):
            _train(Path(out) / variant, rank, variant)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    # fork: the ranks start from this process's imports (torch) instead of importing them again
    mp.start_processes(worker, args=(sys.argv[1], sys.argv[2]), nprocs=WORLD, start_method="fork")
