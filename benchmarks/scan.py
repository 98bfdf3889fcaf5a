"""Scan + rewrite throughput: Ferry vs TorchFix on the same generated corpus, side by side.

    .venv/bin/python benchmarks/scan.py [--files 420] [--jobs N] [--keep DIR]

Generates a corpus (>= 50,000 lines by default) of training scripts that use CUDA idioms,
model/data modules that use torch without CUDA, and plain Python utilities. Then, in one run:
  * Ferry   scan    (tools.scan.api.scan, all 52 rules, process pool, token pre-filter)
  * Ferry   rewrite (tools.scan.api.rewrite: findings + codemods + diff, nothing written)
  * TorchFix check  (`torchfix --select ALL`, which computes its fixes and prints diffs)
TorchFix needs libcst<1.6, so it is installed into a throwaway venv under /tmp (created here,
`pip install --no-deps torchfix` plus its small deps flake8/PyYAML/libcst 1.5; never torch).
Prints lines/s and files/s for each, and the Ferry/TorchFix ratios. Timings are the best of
--repeat interleaved runs (default 3); each run is a fresh process pool (no cross-run caching).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TORCHFIX_VENV = Path(tempfile.gettempdir()) / "ferry-bench-torchfix-venv"

TRAIN = '''"""Training entry point {n}."""
import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.cuda.amp import GradScaler, autocast
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader

from .model_{m} import Net{m}

torch.backends.cudnn.benchmark = True
torch.backends.cuda.matmul.allow_tf32 = True
device = "cuda" if torch.cuda.is_available() else "cpu"


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default={n_epochs})
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--batch-size", type=int, default=64)
    return p.parse_args()


def setup(local_rank):
    dist.init_process_group("nccl")
    torch.cuda.set_device(local_rank)
    torch.cuda.manual_seed_all({seed})


def evaluate(model, loader):
    model.eval()
    total, correct = 0, 0
    with torch.no_grad():
        for x, y in loader:
            x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
            with autocast():
                out = model(x)
            correct += (out.argmax(1) == y).sum().item()
            total += y.numel()
    return correct / max(total, 1)


def train(args, dataset):
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    setup(local_rank)
    model = Net{m}().cuda()
    model = DDP(model, device_ids=[local_rank], output_device=local_rank)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    scaler = GradScaler()
    loader = DataLoader(dataset, batch_size=args.batch_size, pin_memory=True, num_workers=2)
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    for epoch in range(args.epochs):
        start.record()
        for step, (x, y) in enumerate(loader):
            x = x.to(device)
            y = y.cuda()
            opt.zero_grad(set_to_none=True)
            with autocast(dtype=torch.float16):
                loss = nn.functional.cross_entropy(model(x), y)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            if step % 50 == 0:
                print(f"epoch {{epoch}} step {{step}} loss {{loss.item():.4f}}")
        end.record()
        torch.cuda.synchronize()
        print("epoch time", start.elapsed_time(end), torch.cuda.max_memory_allocated())
    if dist.get_rank() == 0:
        torch.save(model.state_dict(), "ckpt_{n}.pt")
    state = torch.load("ckpt_{n}.pt", map_location="cuda:0")
    return state


if __name__ == "__main__":
    train(parse_args(), dataset=None)
'''

MODEL = '''"""Model definitions {n}."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block{n}(nn.Module):
    def __init__(self, dim: int = {dim}, heads: int = 4, dropout: float = 0.1):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, dropout=dropout, batch_first=True)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class Net{n}(nn.Module):
    def __init__(self, vocab: int = 1000, dim: int = {dim}, depth: int = {depth}, classes: int = 10):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.zeros(1, 512, dim))
        self.blocks = nn.ModuleList([Block{n}(dim) for _ in range(depth)])
        self.head = nn.Linear(dim, classes)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.pos, std=0.02)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.trunc_normal_(m.weight, std=0.02)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.pos[:, : tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(x.mean(dim=1))


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def cosine_schedule(step: int, total: int, base: float = {lr}) -> float:
    return 0.5 * base * (1 + math.cos(math.pi * step / max(total, 1)))


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    mask = mask.to(x.dtype)
    return (x * mask).sum(dim=1) / mask.sum(dim=1).clamp_min(1.0)


def label_smoothing_loss(logits: torch.Tensor, target: torch.Tensor, eps: float = 0.1) -> torch.Tensor:
    logp = F.log_softmax(logits, dim=-1)
    nll = -logp.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    return ((1 - eps) * nll - eps * logp.mean(dim=-1)).mean()
'''

UTIL = '''"""Helpers {n}: configuration, logging and file handling (no torch)."""
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path


@dataclass
class Config{n}:
    name: str = "run{n}"
    epochs: int = {n_epochs}
    lr: float = {lr}
    tags: list = field(default_factory=list)

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=2))

    @classmethod
    def load(cls, path: Path) -> "Config{n}":
        return cls(**json.loads(path.read_text()))


def ensure_dir(path: str) -> Path:
    p = Path(path)
    p.mkdir(parents=True, exist_ok=True)
    return p


def find_files(root: str, suffix: str = ".json") -> list:
    out = []
    for dirpath, _, names in os.walk(root):
        for name in sorted(names):
            if name.endswith(suffix):
                out.append(os.path.join(dirpath, name))
    return out


def moving_average(values, window: int = {window}):
    acc, out = 0.0, []
    for i, v in enumerate(values):
        acc += v
        if i >= window:
            acc -= values[i - window]
        out.append(acc / min(i + 1, window))
    return out


def format_table(rows) -> str:
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    return "\\n".join("  ".join(str(c).ljust(w) for c, w in zip(r, widths)) for r in rows)


def parse_kv(text: str) -> dict:
    result = {{}}
    for part in text.split(","):
        if "=" in part:
            k, v = part.split("=", 1)
            result[k.strip()] = v.strip()
    return result
'''


def generate(dest: Path, files: int, seed: int = 0) -> tuple[int, int]:
    rnd = random.Random(seed)
    if dest.exists():
        shutil.rmtree(dest)
    lines = 0
    for i in range(files):
        pkg = dest / f"pkg{i % 20:02d}"
        pkg.mkdir(parents=True, exist_ok=True)
        kind = i % 3  # one third CUDA training scripts, one third torch models, one third utilities
        params = dict(n=i, m=i, dim=rnd.choice([64, 128, 256]), depth=rnd.randint(2, 8), seed=rnd.randint(0, 99),
                      n_epochs=rnd.randint(1, 90), lr=rnd.choice([1e-3, 3e-4]), window=rnd.randint(2, 9))
        text = (TRAIN, MODEL, UTIL)[kind].format(**params)
        name = ("train", "model", "util")[kind]
        (pkg / f"{name}_{i}.py").write_text(text, encoding="utf-8")
        lines += text.count("\n")
    return files, lines


def ensure_torchfix() -> Path:
    exe = TORCHFIX_VENV / "bin" / "torchfix"
    if exe.exists():
        return exe
    subprocess.run([sys.executable, "-m", "venv", str(TORCHFIX_VENV)], check=True)
    pip = [str(TORCHFIX_VENV / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, "--no-deps", "torchfix"], check=True)
    subprocess.run([*pip, "libcst>=1.5,<1.6", "PyYAML", "flake8"], check=True)
    return exe


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=750, help="files in the corpus (default 750, ~51,000 lines)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count(), help="processes for both tools (default: all cores)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", type=Path, help="generate the corpus here and keep it")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    sys.path.insert(0, str(ROOT))
    from tools.scan.api import rewrite, scan
    from tools.scan.models import RewriteRequest, ScanRequest

    work = args.keep or Path(tempfile.mkdtemp(prefix="ferry-bench-"))
    corpus = work / "corpus"
    files, lines = generate(corpus, args.files)
    if lines < 50_000:
        print(f"warning: corpus has only {lines} lines (< 50,000); raise --files", file=sys.stderr)
    torchfix = ensure_torchfix()

    def run_torchfix() -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(torchfix), "--select", "ALL", "--jobs", str(args.jobs), str(corpus)],
                              capture_output=True, text=True)

    runs = {
        "ferry scan": lambda: scan(ScanRequest(path=corpus, jobs=args.jobs, respect_gitignore=False)),
        "ferry rewrite": lambda: rewrite(RewriteRequest(path=corpus, jobs=args.jobs, respect_gitignore=False)),
        "torchfix check": run_torchfix,
    }
    # repeats are interleaved (scan, rewrite, torchfix, scan, ...) so that load changes on a
    # shared machine hit every tool alike; each tool's best time is kept
    best: dict[str, float] = {name: float("inf") for name in runs}
    last: dict[str, object] = {}
    for _ in range(args.repeat):
        for name, fn in runs.items():
            t0 = time.perf_counter()
            last[name] = fn()
            best[name] = min(best[name], time.perf_counter() - t0)
    report, result, proc = last["ferry scan"], last["ferry rewrite"], last["torchfix check"]
    rows = {
        "ferry scan": (best["ferry scan"], f"{report.summary.findings} findings, 52 rules"),  # type: ignore[attr-defined]
        "ferry rewrite": (best["ferry rewrite"], f"{len(result.files)} files rewritten (diff)"),  # type: ignore[attr-defined]
        "torchfix check": (best["torchfix check"],
                           f"diffs for {proc.stdout.count(chr(10) + '--- ')} files"),  # type: ignore[attr-defined]
    }

    out = {"files": files, "lines": lines, "jobs": args.jobs, "results": {}}
    print(f"corpus: {files} files, {lines} lines; {args.jobs} processes each; best of {args.repeat}")
    print(f"{'tool':<16}{'seconds':>9}{'lines/s':>12}{'files/s':>10}  notes")
    for name, (sec, note) in rows.items():
        out["results"][name] = {"seconds": sec, "lines_per_s": lines / sec, "files_per_s": files / sec, "note": note}
        print(f"{name:<16}{sec:>9.2f}{lines / sec:>12.0f}{files / sec:>10.1f}  {note}")
    tf = rows["torchfix check"][0]
    for name in ("ferry scan", "ferry rewrite"):
        ratio = tf / rows[name][0]
        out["results"][name]["x_torchfix"] = ratio
        print(f"{name} throughput = {ratio:.2f}x TorchFix")
    if args.json:
        print(json.dumps(out, indent=2))
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
