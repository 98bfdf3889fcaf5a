"""Helpers: small models run twice under the in-process probe (reference vs target)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch.nn as nn

from tools.probe.child import probe_session


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(width, width * 2)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(width * 2, width)
        self.norm = nn.LayerNorm(width)

    def forward(self, x):
        return self.norm(x + self.fc2(self.act(self.fc1(x))))


class Model(nn.Module):
    def __init__(self, width: int = 32, depth: int = 3) -> None:
        super().__init__()
        self.embed = nn.Linear(16, width)
        self.blocks = nn.Sequential(*[Block(width) for _ in range(depth)])
        self.head = nn.Linear(width, 4)

    def forward(self, x):
        return self.head(self.blocks(self.embed(x)))


def train_probed(out: Path, *, steps: int = 3, probe_steps: int = 2, seed: int = 0, data_seed: int = 1,
                 prepare: Callable[[Model], None] | None = None, device: str = "cpu") -> Path:
    """Train a small model for ``steps`` steps with the probe on; print the loss each step."""
    torch.manual_seed(seed)
    model = Model()
    if prepare is not None:
        prepare(model)
    model.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(data_seed)
    with probe_session(out, steps=probe_steps):
        for step in range(steps):
            x = torch.randn(64, 16, generator=gen).to(device)
            y = torch.randn(64, 4, generator=gen).to(device)
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            print(f"step {step} | loss: {loss.item():.6f}")
    return out


@pytest.fixture
def reference_dump(tmp_path: Path) -> Path:
    return train_probed(tmp_path / "ref")


def tpx_or_skip() -> None:
    """Skip when the tpx backend cannot be loaded in this environment (it is part of Ferry)."""
    try:
        torch.empty(1, device="tpx")
    except (RuntimeError, ImportError) as exc:
        pytest.skip(f"tpx device unavailable: {exc}")
