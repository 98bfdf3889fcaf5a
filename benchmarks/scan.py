"""Scan + rewrite throughput: Ferry vs TorchFix on a generated corpus and on real code, side by side.

    .venv/bin/python benchmarks/scan.py [--corpus both|generated|real] [--mirror DIR] [--jobs N] [--keep DIR]

Two corpora, timed in one run:
  * generated: >= 50,000 lines (--files 750) of training scripts that use CUDA idioms, model/data
    modules that use torch without CUDA, and plain Python utilities;
  * real: the Python files of the real suite's repositories (evals/real/manifest.toml) at their
    pinned commits, checked out of a local mirror of clones (--mirror, default $FERRY_EVAL_MIRROR or
    /work/.mirror) the way `ferry eval real` checks them out. Without a mirror it says what is
    missing and times the generated corpus alone.
On each corpus:
  * Ferry   scan    (tools.scan.api.scan, all rules, token pre-filter)
  * Ferry   rewrite (tools.scan.api.rewrite: findings + codemods + diff, nothing written)
  * TorchFix check  (`torchfix --select ALL`, which computes its fixes and prints diffs)
TorchFix needs libcst<1.6, so it is installed into a throwaway venv under /tmp (created here,
`pip install --no-deps torchfix` plus its small deps flake8/PyYAML/libcst 1.5; never torch).
Prints lines/s and files/s for each, and the Ferry/TorchFix ratios against the targets (scan >= 5x,
rewrite >= 3x). Both tools run in ONE process by default (--jobs 1: like for like; with --jobs N
Ferry uses a process pool and TorchFix its --jobs N). Timings are the best of --repeat (generated,
default 3) or --real-repeat (real, default 1: TorchFix needs minutes for it) interleaved runs; each
Ferry run starts cold (its in-process caches of parsed modules and analyses are cleared first).
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
DEFAULT_MIRROR = Path("/work/.mirror")
# the targets on real code: Ferry's throughput over TorchFix's
TARGETS = {"ferry scan": 5.0, "ferry rewrite": 3.0}

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


def real_corpus(dest: Path, mirror: Path, manifest: Path | None = None) -> tuple[int, int, list[str]]:
    """The real suite's repositories at their pinned commits, their ``.py`` files copied under ``dest``.

    Each distinct (repository, commit) of the real manifest is checked out of ``mirror`` the way the
    eval harness does it (``evals.real_suite.find_clone`` + ``checkout``) into ``dest/../checkouts``;
    only its Python files go into the corpus (``dest/owner+name/...``), so both tools read the same
    files (Ferry's scan would also read notebooks, shell scripts and YAML; TorchFix reads ``.py``).
    Returns the corpus's files and lines and the repositories the mirror lacks (left out)."""
    from evals.cases import REAL_MANIFEST, load_real
    from evals.real_suite import RealCaseError, checkout, find_clone

    if dest.exists():
        shutil.rmtree(dest)
    checkouts = dest.parent / "checkouts"
    if checkouts.exists():
        shutil.rmtree(checkouts)
    pinned = dict.fromkeys((c.repo_name, c.commit) for c in load_real(manifest or REAL_MANIFEST).cases)
    files = lines = 0
    missing: list[str] = []
    for repo, commit in pinned:
        slug = repo.replace("/", "+")
        try:
            clone = find_clone(mirror, repo)
        except RealCaseError:
            missing.append(repo)
            continue
        work = checkouts / f"{slug}@{commit[:12]}"
        checkout(clone, commit, work)
        for src in sorted(work.rglob("*.py")):
            rel = src.relative_to(work)
            if ".git" in rel.parts or not src.is_file():
                continue
            target = dest / f"{slug}@{commit[:12]}" / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            data = src.read_bytes()
            target.write_bytes(data)
            files += 1
            lines += data.count(b"\n")
    shutil.rmtree(checkouts, ignore_errors=True)
    return files, lines, missing


def measure(corpus: Path, jobs: int, repeat: int, torchfix: Path) -> dict[str, tuple[float, str]]:
    """Best seconds (of ``repeat`` interleaved runs) and a note for each tool on ``corpus``."""
    from tools.scan.analysis import clear_caches
    from tools.scan.api import rewrite, scan
    from tools.scan.models import RewriteRequest, ScanRequest

    def run_torchfix() -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(torchfix), "--select", "ALL", "--jobs", str(jobs), str(corpus)],
                              capture_output=True, text=True)

    runs = {
        "ferry scan": lambda: scan(ScanRequest(path=corpus, jobs=jobs, respect_gitignore=False)),
        "ferry rewrite": lambda: rewrite(RewriteRequest(path=corpus, jobs=jobs, respect_gitignore=False)),
        "torchfix check": run_torchfix,
    }
    # repeats are interleaved (scan, rewrite, torchfix, scan, ...) so that load changes on a
    # shared machine hit every tool alike; each tool's best time is kept
    best: dict[str, float] = {name: float("inf") for name in runs}
    last: dict[str, object] = {}
    for _ in range(repeat):
        for name, fn in runs.items():
            clear_caches()  # no run reuses another's parses (a pool's fresh workers would not either)
            t0 = time.perf_counter()
            last[name] = fn()
            best[name] = min(best[name], time.perf_counter() - t0)
    report, result, proc = last["ferry scan"], last["ferry rewrite"], last["torchfix check"]
    return {
        "ferry scan": (best["ferry scan"], f"{report.summary.findings} findings, 52 rules"),  # type: ignore[attr-defined]
        "ferry rewrite": (best["ferry rewrite"], f"{len(result.files)} files rewritten (diff)"),  # type: ignore[attr-defined]
        "torchfix check": (best["torchfix check"],
                           f"diffs for {proc.stdout.count(chr(10) + '--- ')} files"),  # type: ignore[attr-defined]
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", choices=("both", "generated", "real"), default="both",
                    help="which corpora to time (default: both, side by side)")
    ap.add_argument("--files", type=int, default=750, help="files in the generated corpus (default 750, ~51,000 lines)")
    ap.add_argument("--mirror", type=Path, default=Path(os.environ.get("FERRY_EVAL_MIRROR", DEFAULT_MIRROR)),
                    help=f"the real suite's mirror of clones (default $FERRY_EVAL_MIRROR or {DEFAULT_MIRROR})")
    ap.add_argument("--jobs", type=int, default=1,
                    help="processes for each tool (default 1: both single-process, like for like)")
    ap.add_argument("--repeat", type=int, default=3, help="interleaved runs on the generated corpus (best kept)")
    ap.add_argument("--real-repeat", type=int, default=1,
                    help="interleaved runs on the real corpus (default 1: TorchFix takes minutes on it)")
    ap.add_argument("--keep", type=Path, help="write the corpora here and keep them")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    sys.path.insert(0, str(ROOT))
    work = args.keep or Path(tempfile.mkdtemp(prefix="ferry-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    corpora: dict[str, tuple[Path, int, int, int]] = {}  # name -> (dir, files, lines, repeat)
    if args.corpus in ("both", "generated"):
        files, lines = generate(work / "generated", args.files)
        if lines < 50_000:
            print(f"warning: generated corpus has only {lines} lines (< 50,000); raise --files", file=sys.stderr)
        corpora["generated"] = (work / "generated", files, lines, args.repeat)
    if args.corpus in ("both", "real"):
        if not args.mirror.is_dir():
            print(f"real corpus skipped: no mirror of the real suite's repositories at {args.mirror} (pass --mirror "
                  "DIR or set FERRY_EVAL_MIRROR; docs/evals.md, 'Real suite', says how to fetch it)", file=sys.stderr)
        else:
            files, lines, missing = real_corpus(work / "real", args.mirror)
            if missing:
                print(f"real corpus: the mirror {args.mirror} lacks {', '.join(missing)}; left out", file=sys.stderr)
            if files:
                corpora["real"] = (work / "real", files, lines, args.real_repeat)
            else:
                print("real corpus skipped: no repository of evals/real/manifest.toml is in the mirror",
                      file=sys.stderr)
    if not corpora:
        print("nothing to time", file=sys.stderr)
        return 1
    torchfix = ensure_torchfix()

    out: dict[str, object] = {"jobs": args.jobs, "corpora": {}}
    table: list[tuple[str, str, float, float, float, str]] = []
    ratios: list[tuple[str, str, float, float]] = []
    for cname, (cdir, files, lines, repeat) in corpora.items():
        rows = measure(cdir, args.jobs, repeat, torchfix)
        res: dict[str, dict[str, object]] = {}
        for name, (sec, note) in rows.items():
            res[name] = {"seconds": sec, "lines_per_s": lines / sec, "files_per_s": files / sec, "note": note}
            table.append((cname, name, sec, lines / sec, files / sec, note))
        tf = rows["torchfix check"][0]
        for name in ("ferry scan", "ferry rewrite"):
            res[name]["x_torchfix"] = tf / rows[name][0]
            ratios.append((cname, name, tf / rows[name][0], TARGETS[name]))
        out["corpora"][cname] = {"files": files, "lines": lines, "repeat": repeat, "results": res}  # type: ignore[index]

    for cname, (_, files, lines, repeat) in corpora.items():
        print(f"{cname} corpus: {files} files, {lines} lines; best of {repeat}")
    print(f"{args.jobs} process(es) for each tool" + (" (single process, like for like)" if args.jobs == 1 else ""))
    print(f"{'corpus':<11}{'tool':<16}{'seconds':>9}{'lines/s':>10}{'files/s':>9}  notes")
    for cname, name, sec, lps, fps, note in table:
        print(f"{cname:<11}{name:<16}{sec:>9.2f}{lps:>10.0f}{fps:>9.1f}  {note}")
    for cname, name, ratio, target in ratios:
        verdict = "met" if ratio >= target else "NOT met"
        print(f"{cname:<11}{name} throughput = {ratio:.2f}x TorchFix (target >= {target:g}x: {verdict})")
    if args.json:
        print(json.dumps(out, indent=2))
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
