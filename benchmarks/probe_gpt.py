"""Probe cost on a small GPT trainer that samples text inside a step (the mingpt-chargpt pattern).

Run: ``.venv/bin/python benchmarks/probe_gpt.py [--device cpu|tpx] [--steps 6] [--sample 200] [--repeats 3]``

A char-level GPT (4 layers, d=64, block 32) trains ``--steps`` optimizer steps; after the first
one a callback samples ``--sample`` tokens, one forward each, as minGPT's chargpt does at
iteration 0 (all those forwards fall in probe step 1). Each repeat runs the same program (same
seed, same data) plain and then under the probe at its default settings, side by side in one
process, on one thread, and times the whole run. It prints the median whole-run probed/plain
ratio (target <= 1.3x), what the probe recorded (events, root calls, bytes, index writes) and
why it stopped recording.
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
from torch.nn import functional as F  # noqa: E402

from tools.probe import recorder as probe_recorder  # noqa: E402
from tools.probe.child import probe_session  # noqa: E402
from tools.probe.config import ProbeConfig  # noqa: E402

VOCAB, BLOCK, D, HEADS, LAYERS = 65, 32, 64, 4, 4


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(D)
        self.attn = nn.MultiheadAttention(D, HEADS, batch_first=True)
        self.ln_2 = nn.LayerNorm(D)
        self.mlp = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = x.size(1)
        mask = torch.triu(torch.ones(t, t, dtype=torch.bool, device=x.device), 1)
        h = self.ln_1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.wte = nn.Embedding(VOCAB, D)
        self.wpe = nn.Embedding(BLOCK, D)
        self.blocks = nn.ModuleList([Block() for _ in range(LAYERS)])
        self.ln_f = nn.LayerNorm(D)
        self.head = nn.Linear(D, VOCAB, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.size(1), device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln_f(x))

    @torch.no_grad()
    def generate(self, idx: torch.Tensor, n: int) -> torch.Tensor:
        for _ in range(n):
            logits = self(idx[:, -BLOCK:])[:, -1, :]
            nxt = torch.multinomial(F.softmax(logits, dim=-1), num_samples=1)
            idx = torch.cat((idx, nxt), dim=1)
        return idx


def run(device: str, steps: int, sample: int) -> float:
    """Wall time of one whole program: train ``steps`` steps, sampling after the first."""
    t0 = time.perf_counter()
    torch.manual_seed(0)
    model = GPT().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(1)
    for it in range(steps):
        x = torch.randint(0, VOCAB, (16, BLOCK), generator=gen).to(device)
        y = torch.randint(0, VOCAB, (16, BLOCK), generator=gen).to(device)
        loss = F.cross_entropy(model(x).view(-1, VOCAB), y.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if it == 0:  # chargpt's iteration-0 callback
            model.eval()
            model.generate(torch.zeros(1, 1, dtype=torch.long, device=device), sample)
            model.train()
        loss.item()
    return time.perf_counter() - t0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="cpu or tpx (default cpu)")
    parser.add_argument("--steps", type=int, default=6, help="optimizer steps per run (default 6)")
    parser.add_argument("--sample", type=int, default=200, help="tokens sampled after step 0 (default 200)")
    parser.add_argument("--repeats", type=int, default=3, help="side-by-side repeats (default 3)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.device == "tpx":
        import backend  # noqa: F401  # registers the device
    run(args.device, 2, 5)  # warm-up: allocator, kernels, lazy imports
    plain, probed, ratios = [], [], []
    stats: dict[str, object] = {}
    writes = 0
    original_write = probe_recorder.Recorder._write_index

    def counting_write(self: probe_recorder.Recorder) -> None:
        nonlocal writes
        writes += 1
        original_write(self)

    probe_recorder.Recorder._write_index = counting_write  # type: ignore[method-assign]
    for _ in range(args.repeats):
        p = run(args.device, args.steps, args.sample)
        writes = 0
        with tempfile.TemporaryDirectory() as d:
            with probe_session(d) as session:
                q = run(args.device, args.steps, args.sample)
            rec = session.recorder
            stats = {"events": len(rec.events), "root calls seen": session.modules.root_calls,
                     "MiB written": round(rec.bytes_written / 2**20, 2), "index writes": writes,
                     "stopped": rec.meta.get("stopped", "-")}
        plain.append(p)
        probed.append(q)
        ratios.append(q / p)
    probe_recorder.Recorder._write_index = original_write  # type: ignore[method-assign]
    cfg = ProbeConfig(out_dir=Path("."))
    med = statistics.median
    ratio = med(ratios)
    print(f"probe cost on {args.device}: GPT ({LAYERS} layers, d={D}, block {BLOCK}), batch 16, {args.steps} steps, "
          f"{args.sample} sampled tokens after step 0, {args.repeats} repeats, 1 thread")
    print(f"probe defaults: steps={cfg.steps}, calls_per_step={cfg.calls_per_step}, "
          f"max_bytes={cfg.max_bytes >> 20} MiB, max_events={cfg.max_events}")
    print(f"whole run (s): plain {med(plain):.2f}, probed {med(probed):.2f}; "
          f"probed/plain {ratio:.2f}x (each repeat: {', '.join(f'{r:.2f}' for r in ratios)}); "
          f"target <= 1.3x: {'met' if ratio <= 1.3 else 'NOT met'}")
    print("recorded: " + ", ".join(f"{k} {v}" for k, v in stats.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
