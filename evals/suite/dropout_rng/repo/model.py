"""A denoising autoencoder with dropout, built directly on the GPU, and its synthetic data."""

import torch
from torch import nn


class DenoisingAE(nn.Module):
    def __init__(self, n_in: int = 24, hidden: int = 64, code: int = 8, p: float = 0.2, device=None):
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Linear(n_in, hidden, device=device), nn.GELU(), nn.Dropout(p),
            nn.Linear(hidden, code, device=device),
        )
        self.decoder = nn.Sequential(
            nn.Linear(code, hidden, device=device), nn.GELU(), nn.Dropout(p),
            nn.Linear(hidden, n_in, device=device),
        )

    def forward(self, x):
        return self.decoder(self.encoder(x))


def make_signals(n: int = 256, n_in: int = 24, seed: int = 0):
    """Smooth random signals: sums of three sines with random frequencies and phases (host, fixed seed)."""
    g = torch.Generator().manual_seed(seed)
    t = torch.linspace(0, 1, n_in)
    freq = torch.rand(n, 3, 1, generator=g) * 6 + 1
    phase = torch.rand(n, 3, 1, generator=g) * 6.283
    return torch.sin(6.283 * freq * t + phase).sum(1) / 3
