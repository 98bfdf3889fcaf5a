"""Sandbox overhead, measured side by side in one run: python benchmarks/sandbox.py [--reps N]

Prints, as medians over N repetitions:
  1. `python -c pass` unsandboxed vs in the sandbox (isolation in force) -> the sandbox's own cost
  2. the same with the runner's child bootstrap (sitecustomize) on PYTHONPATH
  3. a small torch script unsandboxed vs sandboxed (+ bootstrap)
  4. the workspace copy of a generated 100 MB repository (and the chown to the sandbox uid)
  5. the CUDA redirect's per-op cost (TorchFunctionMode) on a loop of small ops
  6. the small torch script started cold vs forked from a warm interpreter (``sandbox.warm``),
     both in the sandbox with the bootstrap, interleaved: the torch import a warm start saves
  7. the per-run cost of the whole-run limits: `/bin/true` in the sandbox with per-process rlimits
     only, + the run's cgroup (``sandbox.cgroups``), + its capped tmpfs space (``sandbox.runspace``:
     mount, workspace copy into it, a bound artifacts dir, unmount), each with its workspace copy
Target (issue 4): total overhead < 100 ms excluding Python's own start.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sandbox import Limits, create_workspace, detect, run_in_sandbox  # noqa: E402
from sandbox.workspace import _chown_tree  # noqa: E402
from tools.runner.env import CHILD_DIR, child_path_env, ensure_bytecode  # noqa: E402

TORCH_SCRIPT = "import torch\nx = torch.randn(256, 256)\nprint(float((x @ x).sum()))\n"
OPS_SCRIPT = """
import time, torch, os
if os.environ.get("FERRY_REDIRECT_STRATEGY"):
    from tools.redirect.install import install
    install("cpu")
x = torch.randn(16, 16)
for _ in range(200):
    x = (x * 1.0001).add_(0.0)
t = time.perf_counter()
for _ in range(20000):
    x = (x * 1.0001).add_(0.0)
print((time.perf_counter() - t) / 40000 * 1e6)
"""


def median_time(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def direct(argv: list[str], env: dict | None = None) -> None:
    subprocess.run(argv, check=True, capture_output=True, env=env)


def make_repo(root: Path, total_mb: int = 100, files: int = 2000) -> Path:
    repo = root / "repo100mb"
    size = total_mb * 1024 * 1024 // files
    payload = os.urandom(size)
    for i in range(files):
        d = repo / f"pkg{i % 40}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i}.bin").write_bytes(payload)
    return repo


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args()
    info = detect()
    ensure_bytecode()
    py = sys.executable
    print(f"isolation in force: {info.level}  (available: {', '.join(info.available)})")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        small = tmp / "small"
        small.mkdir()
        ws = create_workspace(small, root=tmp)
        limits = Limits(timeout_s=120)
        boot_env = {"PYTHONPATH": str(CHILD_DIR), "FERRY_ROOT": str(ROOT), "FERRY_DEVICE": "cpu",
                    "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}

        def sandboxed(argv, env=None):
            res = run_in_sandbox(argv, ws.path, limits=limits, env=env, path_env=child_path_env())
            assert res.status == "ok", res.stderr

        host_env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
        def interleaved(fns, reps):
            """Run the variants back to back each repetition (drift hits all alike); medians."""
            times = [[] for _ in fns]
            for _ in range(reps):
                for i, fn in enumerate(fns):
                    t = time.perf_counter()
                    fn()
                    times[i].append(time.perf_counter() - t)
            med = [statistics.median(ts) for ts in times]
            diffs = [statistics.median([x - y for x, y in zip(ts, times[0], strict=True)]) for ts in times]
            return med, diffs

        rows = []
        plain_env = {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
        programs = (("python -c pass", "pass", args.reps), ("small torch script", TORCH_SCRIPT, max(3, args.reps // 3)))
        for name, code, reps in programs:
            med, diffs = interleaved([lambda c=code: direct([py, "-c", c], host_env),
                                      lambda c=code: sandboxed([py, "-c", c], plain_env),
                                      lambda c=code: sandboxed([py, "-c", c], boot_env)], reps)
            rows.append((name, med, diffs))
        print(f"\n{'program':<22}{'unsandboxed':>14}{'sandboxed':>12}{'+bootstrap':>12}{'sandbox overhead':>19}"
              f"{'total overhead':>17}")
        for name, (a, b, c), (_, db, dc) in rows:
            print(f"{name:<22}{a * 1e3:>11.1f} ms{b * 1e3:>9.1f} ms{c * 1e3:>9.1f} ms{db * 1e3:>16.1f} ms"
                  f"{dc * 1e3:>14.1f} ms")
        print("(overheads: median of per-repetition differences against the unsandboxed run)")

        repo = make_repo(tmp)
        size = sum(p.stat().st_size for p in repo.rglob("*") if p.is_file())
        copies: list[float] = []
        chowns: list[float] = []
        method = "?"
        for _ in range(3):
            t = time.perf_counter()
            w = create_workspace(repo, root=tmp)
            copies.append(time.perf_counter() - t)
            method = w.method
            t = time.perf_counter()
            _chown_tree(w.path, 654321)
            chowns.append(time.perf_counter() - t)
            w.cleanup()
        t = time.perf_counter()
        shutil.copytree(repo, tmp / "plain", symlinks=True)
        plain = time.perf_counter() - t
        print(f"\nworkspace copy of a {size / 2**20:.0f} MB repo (2000 files): "
              f"{statistics.median(copies) * 1e3:.0f} ms "
              f"({method}); chown to the sandbox uid {statistics.median(chowns) * 1e3:.0f} ms; "
              f"shutil.copytree for comparison {plain * 1e3:.0f} ms")

        env = dict(os.environ, PYTHONPATH=str(ROOT), TORCH_DEVICE_BACKEND_AUTOLOAD="0")
        def per_op(strategy: str | None) -> float:
            e = dict(env, FERRY_REDIRECT_STRATEGY=strategy) if strategy else env
            runs = [float(subprocess.run([py, "-c", OPS_SCRIPT], env=e, capture_output=True, text=True,
                                         check=True).stdout)
                    for _ in range(3)]
            return statistics.median(runs)

        off, patch, mode = per_op(None), per_op("patch"), per_op("mode")
        print(f"\nper-op cost of a small CPU op: {off:.2f} us plain; CUDA redirect 'patch' (default) {patch:.2f} us "
              f"({patch / off:.2f}x); 'mode' (TorchFunctionMode) {mode:.2f} us ({mode / off:.2f}x)")

        if info.level == "bwrap":
            warm_vs_cold(ws.path, boot_env, limits, max(3, args.reps // 3), interleaved)
        else:
            print(f"\nwarm starts: not measured (they need bubblewrap; isolation in force is {info.level})")
        ws.cleanup()
        run_limits_cost(small, tmp, args.reps, interleaved)


def run_limits_cost(small: Path, tmp: Path, reps: int, interleaved) -> None:
    from sandbox.cgroups import detect_control
    from sandbox.runspace import open_run_space

    rlimits_only = Limits(timeout_s=60, run_memory_bytes=None, run_processes=None)
    with_cgroup = Limits(timeout_s=60)

    def one(limits: Limits, space: bool) -> None:
        sp = open_run_space(limits.disk_bytes) if space else None
        try:
            w = create_workspace(small, root=sp.workspace_root if sp is not None else tmp)
            out = tmp / "child"
            out.mkdir()
            if sp is not None:
                sp.bind_into(out)
            res = run_in_sandbox(["/bin/true"], w.path, limits=limits, writable=[out], space=sp)
            assert res.status == "ok", res.stderr
            if sp is not None:
                sp.unbind()
            else:
                w.cleanup()
            shutil.rmtree(out)
        finally:
            if sp is not None:
                sp.close()

    med, diffs = interleaved([lambda: one(rlimits_only, False), lambda: one(with_cgroup, False),
                              lambda: one(with_cgroup, True)], reps)
    print(f"\nwhole-run limits, `/bin/true` in the sandbox (resource control here: {detect_control().level}): "
          f"rlimits only {med[0] * 1e3:.1f} ms, + cgroup {med[1] * 1e3:.1f} ms ({diffs[1] * 1e3:+.1f} ms), "
          f"+ capped tmpfs space {med[2] * 1e3:.1f} ms ({diffs[2] * 1e3:+.1f} ms)")


def warm_vs_cold(workspace: Path, boot_env: dict, limits: Limits, reps: int, interleaved) -> None:
    from sandbox import WarmServer, WarmStart, python_spec
    from sandbox.env import scrubbed_env
    from sandbox.execute import RUN_MARKER_ENV

    (workspace / "bench_torch.py").write_text(TORCH_SCRIPT)
    cmd = "python bench_torch.py"
    path = child_path_env()
    t = time.perf_counter()
    server = WarmServer(scrubbed_env(dict(os.environ), boot_env, path=path), ["torch"],
                        dynamic_keys=frozenset({RUN_MARKER_ENV}))
    assert server.wait_ready(), server.failure
    ready = time.perf_counter() - t
    warm = WarmStart(server, python_spec(cmd, path, sys.executable))
    try:
        def run(w):
            res = run_in_sandbox(["/bin/sh", "-c", cmd], workspace, limits=limits, env=boot_env, path_env=path, warm=w)
            assert res.status == "ok" and res.warm == (w is not None), (res.stderr, res.warm_fallback)

        (cold, hot), _ = interleaved([lambda: run(None), lambda: run(warm)], reps)
    finally:
        server.close()
    print(f"\nsmall torch script in the sandbox: cold start {cold * 1e3:.0f} ms, warm start {hot * 1e3:.0f} ms "
          f"({cold / hot:.1f}x faster); the warm interpreter took {ready * 1e3:.0f} ms to get ready, once")


if __name__ == "__main__":
    main()
