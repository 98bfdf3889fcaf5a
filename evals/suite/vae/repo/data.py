"""Synthetic 8x8 'strokes' images: one of a few bar patterns, jittered, with pixel noise."""

import torch


def _prototypes() -> torch.Tensor:
    protos = torch.zeros(6, 8, 8)
    protos[0, 3:5, :] = 1      # horizontal bar
    protos[1, :, 3:5] = 1      # vertical bar
    protos[2] = torch.eye(8)   # diagonal
    protos[3] = torch.eye(8).flip(1)
    protos[4, 1:7, 1] = protos[4, 1:7, 6] = 1  # two verticals
    protos[5, 1, 1:7] = protos[5, 6, 1:7] = 1  # two horizontals
    return protos


def make_images(n: int = 512, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    protos = _prototypes()
    which = torch.randint(0, len(protos), (n,), generator=g)
    shifts = torch.randint(-1, 2, (n,), generator=g)
    imgs = torch.stack([torch.roll(protos[w], int(s), dims=1) for w, s in zip(which, shifts)])
    noise = 0.1 * torch.rand(n, 8, 8, generator=g)
    return (imgs * 0.9 + noise).clamp(0, 1).view(n, 64)
