"""Probe overhead: the slowdown a probe adds to training steps, and the dump size per step.

Run: ``.venv/bin/python benchmarks/probe.py [--device cpu|tpx] [--steps 40] [--repeats 3]``

Each repeat runs the same training loop (same seed, same data) without and with the probe at
its default settings (FERRY_PROBE_STEPS=2, FERRY_PROBE_GRAD_STEPS=1, FERRY_PROBE_MAX_BYTES=64 MiB)
and with the probe without its gradient recording (FERRY_PROBE_GRAD_STEPS=0), side by side in one
process, on one thread. Per-step medians make it robust to a busy machine. It prints the ratio
on the recorded steps (the worst case), on the steps after them (hooks removed), the whole-run
ratio those give for --steps steps, and the bytes written per recorded step, for both probes: the
difference is what recording the first optimizer step's gradients, AdamW state and updated
parameters costs.
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
from tools.probe.config import DEFAULT_GRAD_STEPS, DEFAULT_MAX_BYTES, DEFAULT_STEPS  # noqa: E402


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
    k, n = DEFAULT_STEPS, args.steps
    base: list[float] = []
    variants = {"probed, no gradients": {"grad_steps": 0}, "probed (default)": {}}
    times: dict[str, list[float]] = {name: [] for name in variants}
    sizes: dict[str, list[int]] = {name: [] for name in variants}
    events: dict[str, int] = {}
    for _ in range(args.repeats):
        base += train(args.device, n)
        for name, settings in variants.items():
            with tempfile.TemporaryDirectory() as d:
                with probe_session(d, **settings) as session:
                    times[name] += train(args.device, n)
                sizes[name].append(session.recorder.bytes_written)
                events[name] = len(session.recorder.events)
    med = statistics.median

    def split(ts: list[float]) -> tuple[float, float]:
        """(median recorded step, median step after the window) over the repeats."""
        return (med([t for i, t in enumerate(ts) if i % n < k]), med([t for i, t in enumerate(ts) if i % n >= k]))

    b_rec, b_after = split(base)
    print(f"probe overhead on {args.device}: transformer (3 layers, d=128), batch 16x32, AdamW, {n} steps x "
          f"{args.repeats} repeats, 1 thread; defaults steps={DEFAULT_STEPS}, grad_steps={DEFAULT_GRAD_STEPS}, "
          f"max_bytes={DEFAULT_MAX_BYTES >> 20} MiB")
    print(f"{'median step time (ms)':34}{'plain':>10}" + "".join(f"{name:>24}" for name in variants))
    rows = {name: split(ts) for name, ts in times.items()}
    recorded = f"  recorded steps (0-{k - 1})"
    print(f"{recorded:34}{b_rec * 1e3:10.1f}" + "".join(
        f"{r * 1e3:14.1f} ({r / b_rec:5.2f}x)" for r, _ in rows.values()))
    print(f"{'  steps after the window':34}{b_after * 1e3:10.1f}" + "".join(
        f"{a * 1e3:14.1f} ({a / b_after:5.2f}x)" for _, a in rows.values()))
    wholes = {name: (k * r + (n - k) * a) / (k * b_rec + (n - k) * b_after) for name, (r, a) in rows.items()}
    print(f"{'  whole run of ' + str(n) + ' steps':34}{'':10}" + "".join(f"{w:22.2f}x " for w in wholes.values())
          + f"  target < 1.3x: {'met' if max(wholes.values()) < 1.3 else 'NOT met'}")
    (g_rec, _), (p_rec, _) = rows["probed (default)"], rows["probed, no gradients"]
    print(f"gradient probe alone: recorded steps {g_rec / p_rec:.2f}x the probe without it, whole run "
          f"{wholes['probed (default)'] / wholes['probed, no gradients']:.2f}x")
    for name in variants:
        print(f"dump, {name}: {med(sizes[name]) / k / 2**20:.2f} MiB per recorded step "
              f"({med(sizes[name]) / 2**20:.2f} MiB total, {events[name]} events)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
