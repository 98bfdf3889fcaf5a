"""tpx speed, measured side by side with the CPU in one run.

    .venv/bin/python benchmarks/backend.py            # full run (a few minutes on 2 cores)
    .venv/bin/python benchmarks/backend.py --quick    # fewer repeats

Rows (median of several timed repeats after warm-up; lower ratio is better):
  * eager train step of a small GPT (4 layers, d=256, seq 128, batch 8): tpx vs CPU (target <= 1.05)
  * eager train step of a small CNN: tpx vs CPU (target <= 1.2)
  * compiled train step (model and optimizer step compiled), torch.compile(backend="tpx"):
    vs CPU eager (target <= 1.0) and vs torch.compile on CPU (inductor) (target <= 1.2)
  * per-op dispatch overhead: a tiny op on tpx minus the same op on CPU, in microseconds (target <= 5)

All runs use torch.set_float32_matmul_precision("highest") (tpx then computes matmuls in full
fp32 like the CPU), so the comparison is like for like. Models are defined here; nothing is
downloaded.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

# This file is named backend.py: keep its folder off sys.path so that `import backend` (and
# PyTorch's device autoload at `import torch`) find Ferry's backend package, not this script.
HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

# ------------------------------------------------------------------ models


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class TinyGPT(nn.Module):
    def __init__(self, vocab: int = 512, d: int = 256, layers: int = 4, heads: int = 4, seq: int = 128) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok(idx) + self.pos(pos)
        for blk in self.blocks:
            x = blk(x)
        logits = self.head(self.ln(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


class SmallCNN(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()

        def unit(cin: int, cout: int) -> nn.Sequential:
            return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())

        self.features = nn.Sequential(unit(3, 32), unit(32, 32), nn.MaxPool2d(2),
                                      unit(32, 64), unit(64, 64), nn.MaxPool2d(2), unit(64, 128))
        self.fc = nn.Linear(128, classes)

    def forward(self, x: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        h = self.features(x).mean(dim=(2, 3))
        return F.cross_entropy(self.fc(h), targets)


# targets (issue 13): eager GPT step <= 1.05x the CPU (CNN <= 1.2x), per-op overhead <= 5 us
EAGER_TARGET = {"gpt": 1.05, "cnn": 1.2}
OVERHEAD_TARGET_US = 5.0

def gpt_batch(device: str) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, 512, (8, 128), generator=g)
    return idx.to(device), torch.roll(idx, -1, dims=1).to(device)


def cnn_batch(device: str) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(32, 3, 32, 32, generator=g)
    return x.to(device), torch.randint(0, 10, (32,), generator=g).to(device)


# ------------------------------------------------------------------ timing


def make_step(kind: str, device: str, compile_backend: str | None) -> Callable[[], float]:
    torch.manual_seed(0)
    model = (TinyGPT() if kind == "gpt" else SmallCNN()).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batch = gpt_batch(device) if kind == "gpt" else cnn_batch(device)
    fwd = torch.compile(model, backend=compile_backend) if compile_backend else model
    # The compiled step compiles the optimizer update too (PyTorch's "compiled optimizer").
    opt_step = torch.compile(opt.step, backend=compile_backend) if compile_backend else opt.step

    def step() -> float:
        opt.zero_grad(set_to_none=True)
        loss = fwd(*batch)
        loss.backward()
        opt_step()
        return float(loss.detach().cpu())

    return step


def median_time(fn: Callable[[], object], warmup: int, repeats: int) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def interleaved(fns: dict[str, Callable[[], object]], warmup: int, repeats: int) -> dict[str, float]:
    """Median seconds per call of each fn, timed in alternation so drift hits all alike."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            samples[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in samples.items()}


def dispatch_overhead_us(device: str, calls: int = 2000, rounds: int = 7) -> dict[str, float]:
    """Microseconds per tiny op (add of two 16-element tensors) on ``device`` and on CPU."""
    out: dict[str, float] = {}
    for dev in (device, "cpu"):
        a = torch.ones(16, device=dev)
        b = torch.ones(16, device=dev)

        def loop(a: torch.Tensor = a, b: torch.Tensor = b) -> None:
            for _ in range(calls):
                torch.add(a, b)

        out[dev] = median_time(loop, 2, rounds) / calls * 1e6
    return out


# ------------------------------------------------------------------ main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats (noisier)")
    parser.add_argument("--device", default="tpx", help="device compared with the CPU (default tpx)")
    parser.add_argument("--json", type=Path, default=ROOT / "benchmarks" / "results" / "backend.json")
    parser.add_argument("--skip-compile", action="store_true", help="eager rows and dispatch only")
    parser.add_argument("--models", nargs="*", default=["gpt", "cnn"], choices=["gpt", "cnn"],
                        help="models to time (default: both)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    torch.set_float32_matmul_precision("highest")
    dev = args.device
    if dev != "cpu":
        import backend

        if hasattr(backend, "configure"):
            backend.configure(matmul_precision="highest")
    warmup, repeats = (2, 5) if args.quick else (3, 11)
    print(f"tpx benchmark: torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"matmul precision 'highest' on CPU and {dev}; median of {repeats} after {warmup} warm-up")
    rows: list[dict[str, object]] = []

    def row(name: str, a: float, b: float, a_label: str, b_label: str, target: float) -> None:
        ratio = a / b
        rows.append({"row": name, a_label: a, b_label: b, "ratio": ratio, "target": target,
                     "meets": ratio <= target})
        print(f"{name:<40} {a_label} {a * 1e3:8.1f} ms   {b_label} {b * 1e3:8.1f} ms   "
              f"ratio {ratio:5.2f}  (target <= {target})  {'ok' if ratio <= target else 'MISSED'}")

    for kind in args.models:
        t = interleaved({dev: make_step(kind, dev, None), "cpu": make_step(kind, "cpu", None)},
                        warmup, repeats)
        row(f"{kind} eager train step: {dev} / cpu", t[dev], t["cpu"], dev, "cpu", EAGER_TARGET.get(kind, 1.2))

    if not args.skip_compile:
        for kind in args.models:
            fns = {
                "compiled_tpx": make_step(kind, dev, dev if dev != "cpu" else "inductor"),
                "eager_cpu": make_step(kind, "cpu", None),
                "compiled_cpu": make_step(kind, "cpu", "inductor"),
            }
            t = interleaved(fns, warmup, repeats)
            row(f"{kind} compiled({dev}) / cpu eager", t["compiled_tpx"], t["eager_cpu"],
                f"compiled-{dev}", "cpu-eager", 1.0)
            row(f"{kind} compiled({dev}) / cpu compiled", t["compiled_tpx"], t["compiled_cpu"],
                f"compiled-{dev}", "cpu-inductor", 1.2)

    us = dispatch_overhead_us(dev)
    overhead = us[dev] - us["cpu"]
    rows.append({"row": "dispatch overhead", "us_device": us[dev], "us_cpu": us["cpu"],
                 "overhead_us": overhead, "target": OVERHEAD_TARGET_US, "meets": overhead <= OVERHEAD_TARGET_US})
    print(f"{'per-op dispatch (add, 16 elements)':<40} {dev} {us[dev]:6.2f} us   cpu {us['cpu']:6.2f} us   "
          f"overhead {overhead:5.2f} us  (target <= {OVERHEAD_TARGET_US})  "
          f"{'ok' if overhead <= OVERHEAD_TARGET_US else 'MISSED'}")

    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"torch": torch.__version__, "threads": torch.get_num_threads(),
                                     "repeats": repeats, "rows": rows}, indent=1), encoding="utf-8")
    print(f"JSON: {args.json}")
    return 0 if all(r["meets"] for r in rows if not math.isnan(float(r.get("ratio", 0.0)))) else 1


if __name__ == "__main__":
    sys.exit(main())
