"""Real data: a ring of 8 Gaussians of radius 2, drawn on the host with a fixed seed."""

import math

import torch

RADIUS = 2.0


def ring_of_gaussians(n: int, seed: int = 0, modes: int = 8, std: float = 0.05) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    k = torch.randint(0, modes, (n,), generator=g).float()
    angle = 2 * math.pi * k / modes
    centres = torch.stack([RADIUS * torch.cos(angle), RADIUS * torch.sin(angle)], dim=1)
    return centres + std * torch.randn(n, 2, generator=g)
