# apex-style prefetcher: a batch made on a side stream is marked as used by the compute stream.
import torch

side = torch.cuda.Stream()
src = torch.arange(6.0).reshape(2, 3)
with torch.cuda.stream(side):
    x = src.cuda(non_blocking=True).mul_(2)
torch.cuda.current_stream().wait_stream(side)
x.record_stream(torch.cuda.current_stream())
print("batch", x.device.type, x.sum().item())
try:
    x.record_stream("not a stream")
except RuntimeError as exc:  # anything but a stream is still refused, as without the redirect
    print("refused", type(exc).__name__)
