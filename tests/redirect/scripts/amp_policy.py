# Attention under CUDA mixed precision (float16), then the same ops under the program's own CPU autocast.
import threading

import torch
import torch.nn.functional as F

torch.manual_seed(0)
x = torch.randn(2, 4, 8, device="cuda")
w = torch.randn(8, 8, device="cuda")


def ops():
    h = x @ w
    att = F.softmax(h @ h.transpose(-1, -2), dim=-1)
    normed = F.layer_norm(h, (8,))
    mixed = torch.einsum("bij,jk->bik", x, w)
    return h, att, normed, mixed, torch.exp(h), h.sum()


def names(tensors):
    return " ".join(str(t.dtype).removeprefix("torch.") for t in tensors)


with torch.autocast("cuda", dtype=torch.float16):
    print("cuda region", names(ops()))
    with torch.autocast("cuda", enabled=False):
        print("cuda off", names(ops()))
with torch.autocast("cpu", dtype=torch.float16):
    print("cpu region", names(ops()))
print("outside", names(ops()))
seen = []
with torch.cuda.amp.autocast(dtype=torch.float16):  # a region is per thread, as autocast is
    worker = threading.Thread(target=lambda: seen.append(names(ops())))
    worker.start()
    worker.join()
    print("legacy spelling", names(ops()))
print("other thread", seen[0])
