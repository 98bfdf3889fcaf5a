"""A small MLP regressor and its synthetic data."""

import torch
from torch import nn


class MLP(nn.Module):
    def __init__(self, n_in: int = 16, hidden: int = 64, n_out: int = 1):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(n_in, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, n_out),
        )

    def forward(self, x):
        return self.net(x)


def make_data(n: int = 512, n_in: int = 16, seed: int = 0):
    """A noisy linear target, generated on the host with a fixed seed."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, n_in, generator=g)
    w = torch.randn(n_in, 1, generator=g) / n_in**0.5
    y = x @ w + 0.1 * torch.randn(n, 1, generator=g)
    return x, y
