# Original multi-process CUDA idioms: nccl process group, DDP with device_ids, DataLoader
# workers with pin_memory, a CUDA generator. Runs unchanged on cpu under the redirect.
import os
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29513")
dist.init_process_group("nccl", rank=0, world_size=1)
local_rank = 0
torch.cuda.set_device(local_rank)
model = torch.nn.Linear(4, 2).cuda(local_rank)
ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank])
print("backend", dist.get_backend())


class DS(Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        return torch.full((4,), float(i), device="cpu")


for batch in DataLoader(DS(), batch_size=2, num_workers=2, pin_memory=True):
    out = ddp(batch.cuda(non_blocking=True))
    out.sum().backward()
g = torch.Generator(device="cuda")
g.manual_seed(1)
print("gen", torch.randn(2, generator=g, device="cuda").device)
dist.destroy_process_group()
print("done", next(ddp.parameters()).device.type)
