"""Noisy observations of a smooth 1-D function, drawn with a fixed seed."""

import math

import torch


def target(x: torch.Tensor) -> torch.Tensor:
    return torch.sin(2 * x) + 0.3 * torch.cos(5 * x)


def make_data(n: int = 40, noise: float = 0.1, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = 2 * math.pi * torch.rand(n, generator=g)
    y = target(x) + noise * torch.randn(n, generator=g)
    return x.unsqueeze(1), y
