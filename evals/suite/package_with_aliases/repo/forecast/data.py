"""Synthetic seasonal series (two sines, a trend and noise) cut into lookback/horizon windows."""

import math

import torch as T
from torch.utils.data import DataLoader, TensorDataset


def make_series(n: int = 1200, seed: int = 0) -> T.Tensor:
    g = T.Generator().manual_seed(seed)
    t = T.arange(n, dtype=T.float32)
    season = T.sin(2 * math.pi * t / 24) + 0.5 * T.sin(2 * math.pi * t / 168)
    return season + 0.001 * t + 0.1 * T.randn(n, generator=g)


def make_windows(series: T.Tensor, lookback: int = 48, horizon: int = 8):
    n = series.numel() - lookback - horizon + 1
    idx = T.arange(lookback + horizon).unsqueeze(0) + T.arange(n).unsqueeze(1)
    w = series[idx]
    return w[:, :lookback], w[:, lookback:]


def make_loaders(lookback: int = 48, horizon: int = 8, batch_size: int = 64, seed: int = 0):
    x, y = make_windows(make_series(seed=seed), lookback, horizon)
    split = int(0.8 * len(x))
    g = T.Generator().manual_seed(seed)
    train = DataLoader(TensorDataset(x[:split], y[:split]), batch_size=batch_size, shuffle=True, generator=g)
    val = DataLoader(TensorDataset(x[split:], y[split:]), batch_size=256)
    return train, val
