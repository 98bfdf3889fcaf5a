# nanoGPT's get_batch: pinned host batches copied to the GPU without blocking.
import torch

device = "cuda"
data = torch.arange(20, dtype=torch.int64)
ix = torch.tensor([0, 5, 10])
x = torch.stack([data[i:i + 4] for i in ix])
x = x.pin_memory().to(device, non_blocking=True)
print("batch", x.device.type, x.tolist())
src = torch.ones(3)
pinned = src.pin_memory()
pinned.add_(1)  # a copy: the source is untouched
print("source", src.tolist(), "pinned", pinned.tolist())
buf = torch.empty(2, 3, pin_memory=True)
print("buffer", tuple(buf.shape))
