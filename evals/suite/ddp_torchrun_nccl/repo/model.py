import torch
from torch import nn


class Regressor(nn.Module):
    def __init__(self, d_in: int = 16, hidden: int = 32) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_in, hidden), nn.Tanh(), nn.Linear(hidden, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x).squeeze(-1)


def make_dataset(n: int = 512, d_in: int = 16, seed: int = 0) -> torch.utils.data.TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d_in, generator=g)
    w = torch.randn(d_in, generator=g)
    y = torch.tanh(x @ w) + 0.05 * torch.randn(n, generator=g)
    return torch.utils.data.TensorDataset(x, y)
