"""Probe overhead: the slowdown a probe adds to training steps, and the dump size per step.

Run: ``.venv/bin/python benchmarks/probe.py [--device cpu|tpx] [--steps 40] [--repeats 3]``

Each repeat times the same training run (same seed, same data) without and with the probe at
its default settings (FERRY_PROBE_STEPS=2, FERRY_PROBE_MAX_BYTES=64 MiB), side by side in one
process, and prints medians: the whole-run ratio (what a probed ``ferry check`` costs), the
ratio on the recorded steps alone (the worst case), and bytes written per recorded step.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn as nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools.probe.child import probe_session  # noqa: E402
from tools.probe.config import DEFAULT_MAX_BYTES, DEFAULT_STEPS  # noqa: E402


def make_model() -> nn.Module:
    layer = nn.TransformerEncoderLayer(d_model=128, nhead=4, dim_feedforward=256, batch_first=True, dropout=0.0)
    return nn.Sequential(nn.Linear(32, 128), nn.TransformerEncoder(layer, num_layers=3), nn.Linear(128, 8))


def train(device: str, steps: int) -> list[float]:
    """Per-step wall times of a small transformer training loop."""
    torch.manual_seed(0)
    model = make_model().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(1)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        x = torch.randn(16, 32, 32, generator=gen).to(device)
        y = torch.randn(16, 32, 8, generator=gen).to(device)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        loss.item()
        times.append(time.perf_counter() - t0)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="cpu or tpx (default cpu)")
    parser.add_argument("--steps", type=int, default=40, help="training steps per run (default 40)")
    parser.add_argument("--repeats", type=int, default=3, help="side-by-side repeats (default 3)")
    args = parser.parse_args()
    if args.steps <= DEFAULT_STEPS:
        parser.error(f"--steps must exceed the probe's {DEFAULT_STEPS} recorded steps")
    torch.set_num_threads(max(1, torch.get_num_threads()))
    train(args.device, 3)  # warm-up: allocator, kernels, lazy imports
    base_total, probe_total, base_rec, probe_rec, sizes = [], [], [], [], []
    for _ in range(args.repeats):
        b = train(args.device, args.steps)
        with tempfile.TemporaryDirectory() as d:
            with probe_session(d) as session:
                p = train(args.device, args.steps)
            sizes.append(session.recorder.bytes_written)
            events = len(session.recorder.events)
        base_total.append(sum(b))
        probe_total.append(sum(p))
        base_rec.append(sum(b[:DEFAULT_STEPS]))
        probe_rec.append(sum(p[:DEFAULT_STEPS]))
    med = statistics.median
    whole = med(probe_total) / med(base_total)
    recorded = med(probe_rec) / med(base_rec)
    per_step = med(sizes) / DEFAULT_STEPS
    print(f"probe overhead on {args.device}: transformer (3 layers, d=128), batch 16x32, {args.steps} steps, "
          f"{args.repeats} repeats; defaults steps={DEFAULT_STEPS}, max_bytes={DEFAULT_MAX_BYTES >> 20} MiB")
    print(f"{'':28}{'baseline':>12}{'probed':>12}{'ratio':>8}")
    print(f"{'whole run (s)':28}{med(base_total):12.3f}{med(probe_total):12.3f}{whole:8.2f}x   target < 1.3x: "
          f"{'met' if whole < 1.3 else 'NOT met'}")
    print(f"{'recorded steps only (s)':28}{med(base_rec):12.3f}{med(probe_rec):12.3f}{recorded:8.2f}x")
    print(f"dump: {per_step / 2**20:.2f} MiB per recorded step ({med(sizes) / 2**20:.2f} MiB total, {events} events)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
