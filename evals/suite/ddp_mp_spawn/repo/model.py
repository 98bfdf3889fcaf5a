import torch
from torch import nn


class Classifier(nn.Module):
    def __init__(self, d_in: int = 12, hidden: int = 24, classes: int = 3) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_in, hidden), nn.ReLU(), nn.Linear(hidden, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def make_data(n: int = 256, d_in: int = 12, classes: int = 3, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d_in, generator=g)
    w = torch.randn(d_in, classes, generator=g)
    return x, (x @ w).argmax(dim=1)


def shard(n: int, rank: int, world_size: int) -> slice:
    """Rank ``rank``'s equal, contiguous part of ``n`` samples."""
    per = n // world_size
    return slice(rank * per, (rank + 1) * per)
