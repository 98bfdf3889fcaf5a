# An original CUDA program written against torch.accelerator (pytorch/examples' distributed scripts, FSDP2):
# it asks whether an accelerator exists and how many before it does any work, and exits without working
# on a machine that has none. Under the redirect it must see the CUDA machine it was written for.
import os
import sys
import tempfile

import torch
import torch.distributed as dist


def verify_min_gpu_count(min_gpus: int = 2) -> bool:
    return torch.accelerator.is_available() and torch.accelerator.device_count() >= min_gpus


if not verify_min_gpu_count():
    print("Unable to locate sufficient 2 gpus to run this example. Exiting.")
    sys.exit(0)

acc = torch.accelerator.current_accelerator()
backend = dist.get_default_backend_for_device(acc)
torch.accelerator.set_device_index(1)
current = torch.accelerator.current_device_index()
with torch.accelerator.device_index(0):
    inside = torch.accelerator.current_device_index()
after = torch.accelerator.current_device_index()
store = os.path.join(tempfile.mkdtemp(), "store")
dist.init_process_group(backend=backend, init_method=f"file://{store}", rank=0, world_size=1)
device = torch.device(f"{acc}:{current}")
model = torch.nn.Linear(4, 2).to(device)
x = torch.randn(3, 4).to(device)
y = torch.zeros(3, 2, device=acc)
loss = torch.nn.functional.mse_loss(model(x), y)
loss.backward()
torch.accelerator.synchronize()
mem = torch.accelerator.memory_allocated()
free, total = torch.accelerator.get_memory_info()


@torch.compile(fullgraph=True)
def scaled(t):
    # questions torch.compile answers at trace time, as it does for torch.cuda's
    n = torch.accelerator.device_count() if torch.accelerator.is_available() else 0
    return t * n


compiled = scaled(torch.ones(2)).tolist()
loader = torch.utils.data.DataLoader(torch.arange(4.0), batch_size=2, pin_memory=True)
batches = [b.tolist() for b in loader]
print(f"acc {acc} backend {backend} group {dist.get_backend()} current {current} inside {inside} after {after}")
print(f"param {next(model.parameters()).device.type} x {x.device.type} y {y.device.type} mem {mem} "
      f"total_positive {total > 0} compiled {compiled} batches {batches}")
dist.destroy_process_group()
