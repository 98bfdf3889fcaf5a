"""torch.distributed speed on tpx, side by side with gloo on the CPU in one run (2 processes).

    .venv/bin/python benchmarks/distributed.py            # a minute or two on 2 cores
    .venv/bin/python benchmarks/distributed.py --quick    # fewer repeats

Rows (median of timed repeats after warm-up; tpx and CPU repeats interleaved, so load hits both):
  * all_reduce bandwidth (bytes / time) of a 1 MB and a 64 MB float32 tensor: tpx (tpxgloo, on the
    tpx memory) vs gloo on CPU tensors; ratio tpx / CPU (target >= 0.8)
  * DDP train step (MLP 256-1024-1024-10, batch 64 per rank, SGD): on tpx:rank with tpxgloo vs on
    the CPU with gloo; ratio tpx / CPU time (target <= 1.2)

Each rank uses its own device, tpx:0 and tpx:1 (TPX_DEVICE_COUNT is set to 2 here); the ranks
meet over tcp://127.0.0.1. matmul precision "highest" on both sides (like for like).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import socket
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TPX_DEVICE_COUNT", "2")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from torch import nn  # noqa: E402

WORLD = 2
SIZES_MB = (1, 64)


def _median_pair(run_tpx: Callable[[], None], run_cpu: Callable[[], None], repeats: int) -> tuple[float, float]:
    """Median seconds of each, repeats interleaved (tpx, cpu, tpx, cpu, ...); ranks in step."""
    times: dict[str, list[float]] = {"tpx": [], "cpu": []}
    for _ in range(repeats):
        for name, fn in (("tpx", run_tpx), ("cpu", run_cpu)):
            dist.barrier()
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return statistics.median(times["tpx"]), statistics.median(times["cpu"])


def _all_reduce_rows(cpu_group: dist.ProcessGroup, repeats: int) -> list[dict]:
    rows = []
    for mb in SIZES_MB:
        n = mb * 2**20 // 4
        x_tpx = torch.ones(n, device=torch.accelerator.current_accelerator())
        x_cpu = torch.ones(n)
        reps = max(3, repeats if mb < 16 else repeats // 4)
        for _ in range(2):  # warm-up (connections, first-touch of the buffers)
            dist.all_reduce(x_tpx)
            dist.all_reduce(x_cpu, group=cpu_group)
        t_tpx, t_cpu = _median_pair(functools.partial(dist.all_reduce, x_tpx),
                                    functools.partial(dist.all_reduce, x_cpu, group=cpu_group), reps)
        bw_tpx, bw_cpu = mb / 1024 / t_tpx, mb / 1024 / t_cpu  # GB/s
        rows.append({"row": f"all_reduce {mb} MB bandwidth (GB/s)", "tpx": bw_tpx, "cpu": bw_cpu,
                     "ratio": bw_tpx / bw_cpu, "target": ">= 0.8", "met": bw_tpx / bw_cpu >= 0.8})
    return rows


def _ddp_row(rank: int, cpu_group: dist.ProcessGroup, repeats: int) -> dict:
    from torch.nn.parallel import DistributedDataParallel as DDP

    def make(device: torch.device, group: dist.ProcessGroup | None) -> Callable[[], None]:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))
        ddp = DDP(model.to(device), process_group=group)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
        g = torch.Generator().manual_seed(rank)
        x, y = torch.randn(64, 256, generator=g).to(device), torch.randint(0, 10, (64,), generator=g).to(device)

        def step() -> None:
            loss = nn.functional.cross_entropy(ddp(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            loss.item()  # the step is finished (a sync on tpx)

        return step

    step_tpx = make(torch.device("tpx", rank), None)
    step_cpu = make(torch.device("cpu"), cpu_group)
    for _ in range(3):
        step_tpx()
        step_cpu()
    t_tpx, t_cpu = _median_pair(step_tpx, step_cpu, repeats)
    return {"row": "DDP train step, 2 processes (ms)", "tpx": t_tpx * 1e3, "cpu": t_cpu * 1e3,
            "ratio": t_tpx / t_cpu, "target": "<= 1.2", "met": t_tpx / t_cpu <= 1.2}


def _worker(rank: int, url: str, repeats: int, out: str) -> None:
    import backend

    backend.configure(matmul_precision="highest")
    torch.set_float32_matmul_precision("highest")
    torch.set_num_threads(max(1, (os.cpu_count() or 2) // WORLD))
    torch.accelerator.set_device_index(rank)
    dist.init_process_group(init_method=url, rank=rank, world_size=WORLD)  # tpx's default: tpxgloo
    cpu_group = dist.new_group(backend="gloo")  # stock gloo, CPU tensors
    rows = [*_all_reduce_rows(cpu_group, repeats), _ddp_row(rank, cpu_group, repeats)]
    if rank == 0:
        Path(out).write_text(json.dumps({"backend": type(dist.group.WORLD).__name__, "rows": rows}))
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repeats")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = ap.parse_args(argv)
    repeats = 8 if args.quick else 20
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = Path(os.environ.get("TMPDIR", "/tmp")) / f"ferry-bench-distributed-{os.getpid()}.json"
    mp.spawn(_worker, args=(f"tcp://127.0.0.1:{port}", repeats, str(out)), nprocs=WORLD)
    result = json.loads(out.read_text())
    out.unlink()
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"torch {torch.__version__}, {WORLD} processes, {os.cpu_count()} cores; tpx group: {result['backend']}")
    print(f"{'row':<40} {'tpx':>10} {'cpu':>10} {'ratio':>7}  target")
    for r in result["rows"]:
        met = "met" if r["met"] else "NOT met"
        print(f"{r['row']:<40} {r['tpx']:>10.3f} {r['cpu']:>10.3f} {r['ratio']:>7.2f}  {r['target']} ({met})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
