"""Synthetic noisy sine signals, three classes by frequency; every item is generated from its index."""

import math

import torch
from torch.utils.data import Dataset

FREQUENCIES = (2.0, 5.0, 9.0)  # cycles per window, one per class


class SignalDataset(Dataset):
    def __init__(self, n: int = 384, length: int = 64, noise: float = 1.2, seed: int = 0):
        self.n, self.length, self.noise, self.seed = n, length, noise, seed

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        g = torch.Generator().manual_seed(self.seed * 100_003 + i)
        label = i % len(FREQUENCIES)
        t = torch.arange(self.length, dtype=torch.float32) / self.length
        phase = 2 * math.pi * torch.rand(1, generator=g)
        x = torch.sin(2 * math.pi * FREQUENCIES[label] * t + phase)
        x = x + self.noise * torch.randn(self.length, generator=g)
        return x.unsqueeze(0), label
