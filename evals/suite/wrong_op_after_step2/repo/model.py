"""A residual MLP classifier with RMSNorm, and its synthetic data (Gaussian clusters)."""

import torch
from torch import nn
from torch.nn import functional as F


def fused_rms_norm(x, weight):
    """Port of our fused RMSNorm kernel for accelerators (one pass, epsilon baked into the kernel)."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-2) * weight


class RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))
        self.fused = False  # switched on after warm-up (see train.py): the fused kernel where a device has one

    def forward(self, x):
        if self.fused and x.device.type != "cpu":
            return fused_rms_norm(x, self.weight)
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Block(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.norm = RMSNorm(d)
        self.fc1 = nn.Linear(d, 2 * d)
        self.fc2 = nn.Linear(2 * d, d)

    def forward(self, x):
        return x + self.fc2(F.silu(self.fc1(self.norm(x))))


class Classifier(nn.Module):
    def __init__(self, n_in: int = 8, d: int = 32, n_blocks: int = 2, n_classes: int = 4):
        super().__init__()
        self.inp = nn.Linear(n_in, d)
        self.blocks = nn.Sequential(*[Block(d) for _ in range(n_blocks)])
        self.norm = RMSNorm(d)
        self.head = nn.Linear(d, n_classes)

    def forward(self, x):
        return self.head(self.norm(self.blocks(self.inp(x))))

    def use_fused_kernels(self, on: bool = True):
        for m in self.modules():
            if isinstance(m, RMSNorm):
                m.fused = on


def make_data(n: int = 512, n_in: int = 8, n_classes: int = 4, seed: int = 0):
    """Points around ``n_classes`` random centres, made on the host with a fixed seed."""
    g = torch.Generator().manual_seed(seed)
    centres = 2.0 * torch.randn(n_classes, n_in, generator=g)
    y = torch.randint(0, n_classes, (n,), generator=g)
    x = centres[y] + torch.randn(n, n_in, generator=g)
    return x, y
