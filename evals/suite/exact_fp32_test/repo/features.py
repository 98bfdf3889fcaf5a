"""Feature pipeline shared by training and serving.

Serving runs on the CPU, training on the GPU, so the features must be the same bits on both:
the statistics are fitted once on the CPU and every transform is elementwise (no reductions on
the device). tests/test_features.py holds that to exact equality.
"""

import torch
import torch.nn as nn

N_CATEGORIES = 5


class Featurizer(nn.Module):
    def __init__(self, n_numeric: int = 4, n_buckets: int = 8):
        super().__init__()
        self.register_buffer("mean", torch.zeros(n_numeric))
        self.register_buffer("std", torch.ones(n_numeric))
        self.register_buffer("boundaries", torch.zeros(n_buckets - 1))
        self.n_buckets = n_buckets

    @torch.no_grad()
    def fit(self, numeric: torch.Tensor) -> "Featurizer":
        logged = self._log_amount(numeric)
        self.mean.copy_(logged.mean(dim=0))
        self.std.copy_(logged.std(dim=0).clamp_min(1e-6))
        qs = torch.linspace(0, 1, self.n_buckets + 1)[1:-1]
        self.boundaries.copy_(torch.quantile(numeric[:, 0], qs))
        return self

    @staticmethod
    def _log_amount(numeric: torch.Tensor) -> torch.Tensor:
        out = numeric.clone()
        out[:, 1] = torch.log1p(numeric[:, 1].clamp_min(0))
        return out

    def forward(self, numeric: torch.Tensor, category: torch.Tensor) -> torch.Tensor:
        z = ((self._log_amount(numeric) - self.mean) / self.std).clamp(-5.0, 5.0)
        buckets = torch.bucketize(numeric[:, 0].contiguous(), self.boundaries)
        onehot_b = nn.functional.one_hot(buckets, self.n_buckets).to(z.dtype)
        onehot_c = nn.functional.one_hot(category, N_CATEGORIES).to(z.dtype)
        cross = z[:, :1] * z[:, 1:]  # pairwise interactions with the first column
        return torch.cat([z, cross, torch.tanh(z), onehot_b, onehot_c], dim=1)

    @property
    def n_features(self) -> int:
        n = self.mean.numel()
        return n + (n - 1) + n + self.n_buckets + N_CATEGORIES
