# An original CUDA DDP program (the pytorch/examples DDP idioms): mp.spawn one process per GPU, one GPU
# per process from device_count() // world_size, set_device, an NCCL group bound to the rank's GPU,
# .cuda(device_ids[0]) / Module.to(rank) / tensor.to(rank), DDP(model, device_ids), barrier(device_ids).
# Runs unchanged on the CPU under the redirect; rank 0 checks the DDP step against one process on the
# concatenated batch.
import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP


def batch(rank):
    g = torch.Generator().manual_seed(100 + rank)
    return torch.randn(4, 3, generator=g), torch.randn(4, 2, generator=g)


def step(model, x, y):
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()


def worker(rank, world_size):
    n = torch.cuda.device_count() // world_size
    device_ids = list(range(rank * n, (rank + 1) * n))
    torch.cuda.set_device(device_ids[0])
    dist.init_process_group("nccl", rank=rank, world_size=world_size, device_id=torch.device("cuda", rank))
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2).cuda(device_ids[0]) if rank == 0 else torch.nn.Linear(3, 2).to(rank)
    ddp = DDP(model, device_ids)
    x, y = batch(rank)
    step(ddp, x.to(rank), y.to(device_ids[0]))
    dist.barrier(device_ids=[device_ids[0]])
    weights = [p.detach().cpu() for p in ddp.parameters()]
    gathered = [torch.zeros_like(weights[0]) for _ in range(world_size)]
    dist.all_gather(gathered, weights[0].to(rank))
    if rank == 0:
        torch.manual_seed(0)
        ref = torch.nn.Linear(3, 2)
        xs, ys = zip(*(batch(r) for r in range(world_size)))
        step(ref, torch.cat(xs), torch.cat(ys))
        same = all(torch.allclose(a, b, atol=1e-6) for a, b in zip(weights, ref.parameters()))
        agree = all(torch.equal(g, gathered[0]) for g in gathered)
        print(f"count {torch.cuda.device_count()} n {n} backend {dist.get_backend()} "
              f"current {torch.cuda.current_device()} matches_one_process {same} ranks_agree {agree}")
    # both ranks leave the group together: a rank tearing gloo down while its peer still computes was seen
    # to abort (SIGABRT, "terminate called without an active exception") once on a loaded 2-core machine
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    world_size = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    mp.spawn(worker, args=(world_size,), nprocs=world_size)
    print("done")
