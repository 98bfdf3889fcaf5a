"""Three Gaussian blobs in the plane, drawn on the host with a fixed seed."""

import math

import torch

N_CLASSES = 3


def make_blobs(n: int, seed: int = 0, std: float = 0.7) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, N_CLASSES, (n,), generator=g)
    angle = 2 * math.pi * y.float() / N_CLASSES
    centres = 2.0 * torch.stack([torch.cos(angle), torch.sin(angle)], dim=1)
    return centres + std * torch.randn(n, 2, generator=g), y
