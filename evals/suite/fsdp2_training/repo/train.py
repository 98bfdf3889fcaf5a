"""Fully sharded data-parallel training (FSDP2) on a 1-D device mesh, one GPU per process:

    torchrun --standalone --nproc_per_node=2 train.py --steps 4
"""
import argparse
import os

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from model import MLP, make_batch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--lr", type=float, default=0.2)
    ap.add_argument("--save", default=None)
    args = ap.parse_args()

    local_rank = int(os.environ["LOCAL_RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    mesh = init_device_mesh("cuda", (world_size,))
    rank = dist.get_rank()

    torch.manual_seed(0)
    model = MLP().cuda()
    for layer in model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)

    x, y = make_batch(rank)
    x, y = x.cuda(), y.cuda()
    losses = []
    for step in range(args.steps):
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean, op=dist.ReduceOp.AVG)
        losses.append(mean.item())
        print(f"step {step} loss {losses[-1]:.6f} world {world_size}", flush=True)  # every rank: all-reduced

    full = {k: v.full_tensor() for k, v in model.state_dict().items()}  # a collective: every rank takes part
    if rank == 0 and args.save:
        torch.save({"model": full, "losses": losses, "world": world_size}, args.save)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
