# fix: {"line": 6}
import torch


def total(x):
    print("torch.float64 total", x.to(dtype=torch.float32).sum())  # torch.float64 is 8 bytes
