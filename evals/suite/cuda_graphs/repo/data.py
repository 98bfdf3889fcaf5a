import torch


def make_data(n: int = 2048, n_in: int = 20, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, n_in, generator=g)
    w = torch.randn(n_in, 1, generator=g) / n_in**0.5
    y = torch.tanh(x @ w) + 0.1 * (x[:, :1] * x[:, 1:2]) + 0.05 * torch.randn(n, 1, generator=g)
    return x, y
