"""Data-parallel training started with torch.multiprocessing.spawn, one GPU per process:

    python train.py --steps 6
"""
import argparse
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

from model import Classifier, make_data, shard

WORLD_SIZE = 2


def worker(rank: int, world_size: int, steps: int, lr: float, save: str | None) -> None:
    os.environ.setdefault("MASTER_ADDR", "localhost")
    os.environ.setdefault("MASTER_PORT", "29541")
    dist.init_process_group("nccl", rank=rank, world_size=world_size)
    torch.cuda.set_device(rank)
    torch.manual_seed(0)
    model = Classifier().to(f"cuda:{rank}")
    ddp = DDP(model, device_ids=[rank])
    x, y = make_data()
    part = shard(len(x), rank, world_size)
    x, y = x[part].cuda(rank), y[part].cuda(rank)
    opt = torch.optim.SGD(ddp.parameters(), lr=lr)
    losses = []
    for step in range(steps):
        loss = torch.nn.functional.cross_entropy(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        mean /= world_size
        losses.append(mean.item())
        if rank == 0:
            print(f"step {step} loss {losses[-1]:.6f} world {world_size}", flush=True)
    if rank == 0 and save:
        torch.save({"model": model.state_dict(), "losses": losses, "world": world_size}, save)
    dist.barrier()
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--lr", type=float, default=0.5)
    ap.add_argument("--save", default=None)
    args = ap.parse_args()
    assert torch.cuda.device_count() >= WORLD_SIZE, f"needs {WORLD_SIZE} GPUs"
    mp.spawn(worker, args=(WORLD_SIZE, args.steps, args.lr, args.save), nprocs=WORLD_SIZE, join=True)


if __name__ == "__main__":
    main()
