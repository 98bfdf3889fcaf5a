"""A short, seeded training run on tpx that reports what ran where (``ferry demo``)."""

from __future__ import annotations

import logging
import warnings

import torch
from torch import nn

from . import kernels, stats  # (the package registered tpx on import)

logger = logging.getLogger(__name__)

MODEL_NAME = "TinyConvNet (Conv2d-BatchNorm-ReLU-Linear, 8x8 inputs, 4 classes)"


class TinyConvNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2)
        )
        self.head = nn.Linear(8 * 4 * 4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).flatten(1))


def run_demo(steps: int, seed: int = 0, batch: int = 16) -> dict:
    """Train ``TinyConvNet`` for ``steps`` Adam steps on tpx; return losses and per-op placement."""
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    device = torch.device("tpx")
    torch.manual_seed(seed)
    model = TinyConvNet().to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    x = torch.randn(batch * 4, 1, 8, 8)
    y = (x.mean(dim=(1, 2, 3)) > 0).long() + 2 * (x[:, :, :4].mean(dim=(1, 2, 3)) > 0).long()
    stats.reset()
    losses: list[float] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", kernels.TpxFallbackWarning)
        for step in range(steps):
            lo = (step * batch) % x.shape[0]
            xb, yb = x[lo:lo + batch].to(device), y[lo:lo + batch].to(device)
            loss = nn.functional.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
            # which samples are still wrong: a data-dependent shape, so a counted CPU fallback
            wrong = (model(xb).argmax(1) != yb).nonzero()
            logger.debug("step %d: %d wrong", step, wrong.shape[0])
    snap = stats.snapshot()
    ops = [
        {"op": name, "calls": row["calls"], "where": row["where"]}
        for name, row in snap["ops"].items()
    ]
    return {
        "model": MODEL_NAME,
        "device": "tpx",
        "losses": losses,
        "ops": ops,
        "syncs": snap["syncs"],
        "bytes_host_to_device": snap["bytes_host_to_device"],
        "bytes_device_to_host": snap["bytes_device_to_host"],
    }
