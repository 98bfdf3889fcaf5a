"""Single-node DistributedDataParallel training (works with one process too).

Usage: python train.py [--steps N]          (or under torchrun)
"""

import argparse
import os
import tempfile

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def setup():
    rank = int(os.environ.get("RANK", 0))
    world_size = int(os.environ.get("WORLD_SIZE", 1))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if "MASTER_ADDR" in os.environ:
        init_method = "env://"
    else:
        init_method = "file://" + os.path.join(tempfile.mkdtemp(), "dist_init")
    dist.init_process_group(backend="nccl", init_method=init_method, rank=rank, world_size=world_size)
    torch.cuda.set_device(local_rank)
    return rank, world_size, local_rank


def build_model():
    return nn.Sequential(nn.Linear(10, 32), nn.Tanh(), nn.Linear(32, 2))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=12)
    args = parser.parse_args()

    rank, world_size, local_rank = setup()
    torch.manual_seed(0)
    model = build_model().cuda(local_rank)
    ddp = DDP(model, device_ids=[local_rank], output_device=local_rank)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)

    g = torch.Generator().manual_seed(100 + rank)
    for step in range(args.steps):
        x = torch.randn(32, 10, generator=g).cuda(local_rank)
        y = (x[:, 0] > 0).long()
        loss = F.cross_entropy(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        reported = loss.detach().clone()
        dist.all_reduce(reported)
        reported /= world_size
        if rank == 0:
            print(f"step {step} loss {reported.item():.6f}")

    dist.barrier(device_ids=[local_rank])
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
