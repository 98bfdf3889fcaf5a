"""Data-parallel training, one GPU per process:

    torchrun --standalone --nproc_per_node=2 train.py --epochs 2
"""
import argparse
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

from model import Regressor, make_dataset


def setup() -> tuple[int, int, torch.device]:
    dist.init_process_group(backend="nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    return dist.get_rank(), dist.get_world_size(), torch.device(f"cuda:{local_rank}")


def mean_over_ranks(value: torch.Tensor) -> float:
    value = value.detach().clone()
    dist.all_reduce(value, op=dist.ReduceOp.SUM)
    return value.item() / dist.get_world_size()


def train(epochs: int, batch_size: int, lr: float, save: str | None) -> list[float]:
    rank, world, device = setup()
    torch.manual_seed(0)
    torch.cuda.manual_seed_all(0)
    model = Regressor().to(device)
    ddp = DDP(model, device_ids=[device.index], output_device=device.index)
    dataset = make_dataset()
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler, pin_memory=True)
    opt = torch.optim.SGD(ddp.parameters(), lr=lr, momentum=0.9)
    losses = []
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        total = torch.zeros((), device=device)
        for x, y in loader:
            x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
            loss = torch.nn.functional.mse_loss(ddp(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total += loss.detach()
        epoch_loss = mean_over_ranks(total / len(loader))
        losses.append(epoch_loss)
        if rank == 0:
            print(f"epoch {epoch} loss {epoch_loss:.6f} world {world}", flush=True)
    if rank == 0 and save:
        torch.save({"model": model.state_dict(), "losses": losses, "world": world}, save)
    dist.barrier()
    dist.destroy_process_group()
    return losses


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--save", default=None)
    args = ap.parse_args()
    train(args.epochs, args.batch_size, args.lr, args.save)


if __name__ == "__main__":
    main()
