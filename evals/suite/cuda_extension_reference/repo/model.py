import torch
import torch.nn as nn

from fused_ops import bias_gelu


class FusedMLP(nn.Module):
    """Linear (no bias) -> fused bias+GELU -> Linear, as in Megatron-style transformer MLPs."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden, bias=False)
        self.bias1 = nn.Parameter(torch.zeros(hidden))
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        return self.fc2(bias_gelu(self.fc1(x), self.bias1))


class Regressor(nn.Module):
    def __init__(self, n_in: int = 12, dim: int = 32, hidden: int = 128, depth: int = 2):
        super().__init__()
        self.inp = nn.Linear(n_in, dim)
        self.blocks = nn.ModuleList([FusedMLP(dim, hidden) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.out = nn.Linear(dim, 1)

    def forward(self, x):
        h = self.inp(x)
        for block in self.blocks:
            h = h + block(h)
        return self.out(self.norm(h)).squeeze(-1)
