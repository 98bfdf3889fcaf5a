"""Probe overhead: the slowdown a probe adds to training steps, and the dump size per step.

Run: ``.venv/bin/python benchmarks/probe.py [--device cpu|tpx] [--steps 40] [--repeats 3]``

Each repeat runs the same training loop (same seed, same data) without and with the probe at
its default settings (FERRY_PROBE_STEPS=2, FERRY_PROBE_MAX_BYTES=64 MiB), side by side in one
process, on one thread. Per-step medians make it robust to a busy machine. It prints the ratio
on the recorded steps (the worst case), on the steps after them (hooks removed), the whole-run
ratio those give for --steps steps, and the bytes written per recorded step.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

# run as a script: make the repo root, not benchmarks/, the first import location
sys.path[0] = str(Path(__file__).resolve().parents[1])

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

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
    parser.add_argument("--steps", type=int, default=20, help="training steps per run (default 20)")
    parser.add_argument("--repeats", type=int, default=3, help="side-by-side repeats (default 3)")
    args = parser.parse_args()
    if args.steps <= DEFAULT_STEPS:
        parser.error(f"--steps must exceed the probe's {DEFAULT_STEPS} recorded steps")
    torch.set_num_threads(1)
    train(args.device, 3)  # warm-up: allocator, kernels, lazy imports
    base_rec, base_after, rec, after, sizes, events = [], [], [], [], [], 0
    for _ in range(args.repeats):
        b = train(args.device, args.steps)
        with tempfile.TemporaryDirectory() as d:
            with probe_session(d) as session:
                p = train(args.device, args.steps)
            sizes.append(session.recorder.bytes_written)
            events = len(session.recorder.events)
        base_rec += b[:DEFAULT_STEPS]
        base_after += b[DEFAULT_STEPS:]
        rec += p[:DEFAULT_STEPS]
        after += p[DEFAULT_STEPS:]
    med = statistics.median
    br_step, ba_step, r_step, a_step = med(base_rec), med(base_after), med(rec), med(after)
    n = args.steps
    k = DEFAULT_STEPS
    whole = (k * r_step + (n - k) * a_step) / (k * br_step + (n - k) * ba_step)
    per_step = med(sizes) / DEFAULT_STEPS
    print(f"probe overhead on {args.device}: transformer (3 layers, d=128), batch 16x32, {n} steps x "
          f"{args.repeats} repeats, 1 thread; defaults steps={DEFAULT_STEPS}, max_bytes={DEFAULT_MAX_BYTES >> 20} MiB")
    print(f"{'median step time (ms)':34}{'baseline':>10}{'probed':>10}{'ratio':>8}")
    recorded = f"  recorded steps (0-{k - 1})"
    print(f"{recorded:34}{br_step * 1e3:10.1f}{r_step * 1e3:10.1f}{r_step / br_step:8.2f}x")
    print(f"{'  steps after the window':34}{ba_step * 1e3:10.1f}{a_step * 1e3:10.1f}{a_step / ba_step:8.2f}x")
    print(f"{'  whole run of ' + str(n) + ' steps':34}{'':20}{whole:8.2f}x   target < 1.3x: "
          f"{'met' if whole < 1.3 else 'NOT met'}")
    print(f"dump: {per_step / 2**20:.2f} MiB per recorded step ({med(sizes) / 2**20:.2f} MiB total, {events} events)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
