"""Synthetic 8x8 "digits": one noisy template per class, generated from a fixed seed."""

import torch
from torch.utils.data import Dataset


class SyntheticDigits(Dataset):
    """``n`` grey-scale 8x8 images of 10 classes (a class template plus Gaussian noise)."""

    def __init__(self, n: int = 640, seed: int = 0, noise: float = 0.5):
        g = torch.Generator().manual_seed(1234)  # the templates are the same for every split
        templates = (torch.rand(10, 1, 8, 8, generator=g) > 0.5).float()
        g = torch.Generator().manual_seed(seed)
        self.targets = torch.randint(0, 10, (n,), generator=g)
        self.images = templates[self.targets] + noise * torch.randn(n, 1, 8, 8, generator=g)
        self.images = (self.images - 0.5) / 0.5

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, index: int):
        return self.images[index], self.targets[index]
