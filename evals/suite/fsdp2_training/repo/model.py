import torch
from torch import nn


class MLP(nn.Module):
    def __init__(self, d_in: int = 8, hidden: int = 16, depth: int = 2) -> None:
        super().__init__()
        dims = [d_in] + [hidden] * depth
        self.layers = nn.ModuleList(nn.Sequential(nn.Linear(a, b), nn.Tanh()) for a, b in zip(dims, dims[1:]))
        self.head = nn.Linear(hidden, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return self.head(x).squeeze(-1)


def make_batch(rank: int, n: int = 32, d_in: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank ``rank``'s own batch (the same on every run)."""
    g = torch.Generator().manual_seed(100 + rank)
    x = torch.randn(n, d_in, generator=g)
    return x, torch.sin(x.sum(dim=1))
