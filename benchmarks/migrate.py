"""Migration wall time divided by the time of the case's own run (target: median under 3x).

    .venv/bin/python benchmarks/migrate.py [CASE ...] [--suite synthetic|DIR]

For each case of the synthetic eval suite (default: a few of different kinds; `all` for every
one): ``ferry migrate`` (offline policy, subprocess, fresh state dir) is timed end to end; then
the case's own run command is timed on the migrated code on tpx in the same sandbox (no probe,
no profile), the cost a user pays anyway, three times, the median kept (one run's time varies by
a second on a shared machine). Both are measured side by side in this one process; the table
shows the ratio and where the migration's time went. Runs go side by side inside a migration as
the run scheduler (``agent.migration.runs``) decides (``FERRY_PARALLEL_RUNS=1`` measures them in order).
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
    args = ap.parse_args()
    suite = load_suite(args.suite)
    names = None if args.cases == ["all"] else (args.cases or [c for c in DEFAULT_CASES if c in
                                                               {k.name for k in suite.cases}] or None)
    cases = [c for c in suite.select(names).cases if isinstance(c, SyntheticCase)]
    rows = []
    for case in cases:
        tmp = Path(tempfile.mkdtemp(prefix="ferry-bench-"))
        out = tmp / "out"
        cmd = [sys.executable, "-m", "agent.cli", "migrate", str(case.repo), "--run", case.run, "--offline",
               "--json", "--out", str(out), "--state-dir", str(tmp / "state")]
        if case.test:
            cmd += ["--test", case.test]
        t0 = time.perf_counter()
        subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        migrate_s = time.perf_counter() - t0
        result = json.loads((out / "result.json").read_text()) if (out / "result.json").exists() else {}
        migrated = tmp / "migrated"
        shutil.copytree(case.repo, migrated)
        patch = (out / "ferry.patch").read_text() if (out / "ferry.patch").exists() else ""
        if patch:
            git_apply(migrated, patch)
        owns = [adapters.run(migrated, case.run, device="tpx", redirect_cuda=None, probe=False, profile=False,
                            timeout_s=600, seed=0, artifacts_dir=tmp / f"own-{i}") for i in range(args.own_runs)]
        own = sorted(owns, key=lambda r: r.get("duration_s") or float("inf"))[len(owns) // 2]  # the median run
        t_runs = {}
        for r in result.get("run_log", []):
            t_runs[r["kind"]] = t_runs.get(r["kind"], 0.0) + (r.get("duration_s") or 0.0)
        rows.append({"case": case.name, "status": result.get("status"), "migrate_s": migrate_s,
                     "own_run_s": own.get("duration_s") or float("nan"), "own_status": own.get("status"),
                     "runs": result.get("runs"), "iterations": result.get("iterations"), "by_kind": t_runs})
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{'case':22} {'status':14} {'migrate s':>9} {'own run s':>9} {'ratio':>6}  runs iters  time in runs by kind")
    for r in rows:
        ratio = r["migrate_s"] / r["own_run_s"] if r["own_run_s"] else float("nan")
        kinds = ", ".join(f"{k} {v:.1f}s" for k, v in r["by_kind"].items())
        print(f"{r['case']:22} {r['status']!s:14} {r['migrate_s']:9.1f} {r['own_run_s']:9.1f} {ratio:6.2f}  "
              f"{r['runs']!s:>4} {r['iterations']!s:>5}  {kinds}")
    ratios = sorted(r["migrate_s"] / r["own_run_s"] for r in rows if r["own_run_s"])
    if ratios:
        print(f"median ratio {statistics.median(ratios):.2f} (target < 3), mean {statistics.fmean(ratios):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
