"""Synthetic tabular data: numeric columns with heavy tails, a categorical column, a binary label."""

import torch


def make_table(n: int = 2000, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    numeric = torch.randn(n, 4, generator=g) * torch.tensor([1.0, 10.0, 0.1, 3.0]) + torch.tensor([0.0, 50.0, 1.0, -2.0])
    numeric[:, 1] = numeric[:, 1].abs() ** 1.5  # a skewed, positive "amount" column
    category = torch.randint(0, 5, (n,), generator=g)
    score = 0.8 * numeric[:, 0] - 0.02 * numeric[:, 1] + 3.0 * numeric[:, 2] + (category == 2).float() - 0.3 * numeric[:, 3]
    label = (score + 0.3 * torch.randn(n, generator=g) > score.median()).long()
    return numeric, category, label
