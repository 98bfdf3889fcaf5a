"""Migration wall time divided by the time of the case's own run (target: median <= 2.5x on the synthetic suite).

    .venv/bin/python benchmarks/migrate.py [CASE ...] [--suite synthetic|DIR]

For each case of the synthetic eval suite (default: a few of different kinds; `all` for every
one): ``ferry migrate`` (offline policy, subprocess, fresh state dir) is timed end to end; then
the case's own run command is timed on the migrated code on tpx in the same sandbox (no probe,
no profile), the cost a user pays anyway, three times, the median kept (one run's time varies by
a second on a shared machine). Both are measured side by side in this one process; the table
shows the ratio and where the migration's time went. Runs go side by side inside a migration as
the run scheduler (``agent.migration.runs``) decides (``FERRY_PARALLEL_RUNS=1`` measures them in order).

``--against DIR`` (a checkout of another commit, e.g. ``git worktree add /tmp/base main``) also times that
checkout's ``ferry migrate`` on each case, alternating with this one's, under the same interpreter, so that a
change is measured before and after under the same load; its ratios print beside this checkout's.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DEFAULT_CASES = ["mlp_training", "cnn_training", "host_sync_loop", "data_dependent_loss", "lstm_lm"]


def main() -> int:
    from agent.migration import adapters
    from evals.cases import SyntheticCase, load_suite
    from tools.patch import git_apply

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cases", nargs="*", help=f"case names, or all (default: {' '.join(DEFAULT_CASES)})")
    ap.add_argument("--suite", default="synthetic")
    ap.add_argument("--own-runs", type=int, default=3, help="times the sample's own run is timed (median kept)")
    ap.add_argument("--against", type=Path, default=None,
                    help="a checkout of another commit, timed side by side on each case (before/after)")
    args = ap.parse_args()
    suite = load_suite(args.suite)
    names = None if args.cases == ["all"] else (args.cases or [c for c in DEFAULT_CASES if c in
                                                               {k.name for k in suite.cases}] or None)
    cases = [c for c in suite.select(names).cases if isinstance(c, SyntheticCase)]
    rows = []
    for case in cases:
        tmp = Path(tempfile.mkdtemp(prefix="ferry-bench-"))
        out = tmp / "out"
        migrate_s, result = _migrate(ROOT, case.repo, case.run, case.test, out, tmp / "state")
        base_s, base = (_migrate(args.against, case.repo, case.run, case.test, tmp / "base-out", tmp / "base-state")
                        if args.against else (None, {}))
        migrated = tmp / "migrated"
        shutil.copytree(case.repo, migrated)
        patch = (out / "ferry.patch").read_text() if (out / "ferry.patch").exists() else ""
        if patch:
            git_apply(migrated, patch)
        owns = [adapters.run(migrated, case.run, device="tpx", redirect_cuda=None, probe=False, profile=False,
                            timeout_s=600, seed=0, artifacts_dir=tmp / f"own-{i}") for i in range(args.own_runs)]
        own = sorted(owns, key=lambda r: r.duration_s if r.ok else float("inf"))[len(owns) // 2]  # the median run
        t_runs: dict[str, float] = {}
        t_start: dict[str, float] = {}
        for r in result.get("run_log", []):
            if not r.get("reused"):  # a run made earlier in another role (the trial's run as the target run)
                t_runs[r["kind"]] = t_runs.get(r["kind"], 0.0) + (r.get("duration_s") or 0.0)
                for part, v in (r.get("startup") or {}).items():
                    t_start[part] = t_start.get(part, 0.0) + (v or 0.0)
        t_nodes: dict[str, float] = {}
        for st in result.get("steps", []):
            t_nodes[st["node"]] = t_nodes.get(st["node"], 0.0) + (st.get("seconds") or 0.0)
        rows.append({"case": case.name, "status": result.get("status"), "migrate_s": migrate_s,
                     "own_run_s": own.duration_s if own.ok else float("nan"), "own_status": own.status,
                     "runs": result.get("runs"), "iterations": result.get("iterations"), "by_kind": t_runs,
                     "by_node": t_nodes, "startup": t_start, "base_s": base_s, "base_status": base.get("status"),
                     "base_runs": base.get("runs")})
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{'case':22} {'status':14} {'migrate s':>9} {'own run s':>9} {'ratio':>6}  runs iters  time in runs by kind")
    for r in rows:
        ratio = r["migrate_s"] / r["own_run_s"] if r["own_run_s"] else float("nan")
        kinds = ", ".join(f"{k} {v:.1f}s" for k, v in r["by_kind"].items())
        print(f"{r['case']:22} {r['status']!s:14} {r['migrate_s']:9.1f} {r['own_run_s']:9.1f} {ratio:6.2f}  "
              f"{r['runs']!s:>4} {r['iterations']!s:>5}  {kinds}")
    print("where the time went, by node (seconds on the main thread; a node that joins a run waits for it):")
    for r in rows:
        nodes = ", ".join(f"{k} {v:.1f}" for k, v in sorted(r["by_node"].items(), key=lambda kv: -kv[1]) if v >= 0.05)
        print(f"  {r['case']:22} {nodes}")
    print("start-up before the user's first line, summed over the runs each migration made (seconds: copy, "
          "sandbox+interpreter, bootstrap = torch import + tpx load + redirect + probe/profiler hooks):")
    for r in rows:
        st = r["startup"]
        parts = ", ".join(f"{k.removesuffix('_s')} {st[k]:.2f}" for k in
                          ("workspace_s", "launch_s", "bootstrap_s", "torch_s", "device_s", "redirect_s", "hooks_s")
                          if k in st)
        print(f"  {r['case']:22} first line {st.get('first_line_s', 0.0):.2f} ({parts})")
    ratios = sorted(r["migrate_s"] / r["own_run_s"] for r in rows if r["own_run_s"])
    if ratios:
        print(f"median ratio {statistics.median(ratios):.2f} (target <= 2.5), mean {statistics.fmean(ratios):.2f}")
    if args.against:
        print(f"side by side with {args.against} (same own run):")
        print(f"{'case':22} {'status':14} {'before s':>9} {'ratio':>6} {'runs':>4}   "
              f"{'after s':>8} {'ratio':>6} {'runs':>4}")
        for r in rows:
            print(f"{r['case']:22} {r['base_status']!s:14} {r['base_s']:9.1f} {r['base_s'] / r['own_run_s']:6.2f} "
                  f"{r['base_runs']!s:>4}   {r['migrate_s']:8.1f} {r['migrate_s'] / r['own_run_s']:6.2f} "
                  f"{r['runs']!s:>4}")
        before = [r["base_s"] / r["own_run_s"] for r in rows if r["own_run_s"]]
        if before:
            print(f"median ratio before {statistics.median(before):.2f}, after {statistics.median(ratios):.2f}")
    return 0


def _migrate(root: Path, repo: Path, run: str, test: str | None, out: Path, state: Path) -> tuple[float, dict]:
    """``ferry migrate`` of the checkout at ``root`` on one case (its own imports first: cwd on sys.path),
    timed end to end; (seconds, its result.json)."""
    cmd = [sys.executable, "-m", "agent.cli", "migrate", str(repo), "--run", run, "--offline",
           "--json", "--out", str(out), "--state-dir", str(state)]
    if test:
        cmd += ["--test", test]
    t0 = time.perf_counter()
    subprocess.run(cmd, capture_output=True, text=True, cwd=root)
    seconds = time.perf_counter() - t0
    result = json.loads((out / "result.json").read_text()) if (out / "result.json").exists() else {}
    return seconds, result


if __name__ == "__main__":
    sys.exit(main())
