"""Synthetic 3x8x8 uint8 images: class 0 bright top half, 1 bright left half, 2 bright diagonal."""

import torch
from torch.utils.data import DataLoader, TensorDataset

N_CLASSES = 3


def make_images(n: int = 384, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % N_CLASSES
    base = torch.randint(0, 120, (n, 3, 8, 8), generator=g)
    masks = torch.zeros(N_CLASSES, 8, 8, dtype=torch.bool)
    masks[0, :4, :] = True
    masks[1, :, :4] = True
    masks[2] = torch.eye(8, dtype=torch.bool) | torch.eye(8, dtype=torch.bool).roll(1, dims=1)
    bright = masks[y].unsqueeze(1) & (torch.rand(n, 1, 8, 8, generator=g) < 0.7)
    return (base + 130 * bright).to(torch.uint8), y


def make_loader(n: int = 384, batch: int = 32, shuffle: bool = True, seed: int = 0) -> DataLoader:
    x, y = make_images(n, seed)
    return DataLoader(TensorDataset(x, y), batch_size=batch, shuffle=shuffle, pin_memory=True,
                      generator=torch.Generator().manual_seed(seed))
