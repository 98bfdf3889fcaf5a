"""A small training loop with the habits the profiler must find (markers name the lines)."""

from __future__ import annotations

import torch
import torch.nn as nn


def train(device: str, steps: int = 6) -> list[float]:
    torch.manual_seed(0)
    model = nn.Linear(8, 2).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for _ in range(steps):
        x = torch.randn(16, 8).to(device)  # MARK:h2d
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())  # MARK:item
        picked = x[x > 0].sum()  # MARK:mask
        idx = (x > 1).nonzero()  # MARK:nonzero
        del picked, idx
    return losses


def compiled(steps: int = 3) -> None:
    def f(x):
        y = x * 2
        print("inside")  # MARK:print
        return y.relu()

    cf = torch.compile(f, backend="eager")
    for i in range(steps):
        cf(torch.randn(4 + i))  # varying shape: a recompile
