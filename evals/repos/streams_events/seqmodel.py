"""A GRU sequence classifier."""

import torch
from torch import nn


class GRUClassifier(nn.Module):
    def __init__(self, n_in: int = 8, hidden: int = 32, n_classes: int = 3):
        super().__init__()
        self.gru = nn.GRU(n_in, hidden, batch_first=True)
        self.head = nn.Linear(hidden, n_classes)

    def forward(self, x):
        _, h = self.gru(x)
        return self.head(h[-1])


def make_sequences(n: int = 192, length: int = 12, n_in: int = 8, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, length, n_in, generator=g)
    y = (x[:, :, 0].sum(dim=1) > 0).long() + (x[:, -1, 1] > 1).long()
    return x, y
