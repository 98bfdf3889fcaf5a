"""Probe cost on the real suite's own commands: each case's run plain and probed, side by side.

Run: ``.venv/bin/python benchmarks/probe_real.py --mirror /path/to/mirror [--case NAME ...] [--repeats 1]
[--work DIR]``

For every case of ``evals/real/manifest.toml`` (or the ``--case`` ones) the checkout is prepared
as ``ferry eval real`` prepares it (clone from the mirror at the pinned commit, the case's data
script), then its command runs in the sandbox as the reference run does (CPU, CUDA redirected to
CPU, the case's FERRY_*/TPX_* settings): one unmeasured warm-up run, then ``--repeats`` pairs of
runs without and with the probe, the order alternating, in one process. It prints each case's
median probed/plain wall-time ratio, what the probe recorded, and the largest ratio (issue 18's
target: <= 1.3x on every case). A case whose run fails or that cannot be prepared is named and
counts against the target; the exit status is 0 only when every case was measured within it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path[0] = str(Path(__file__).resolve().parents[1])

from agent.migration import adapters  # noqa: E402
from evals.cases import RealCase, load_real  # noqa: E402
from evals.real_suite import RealCaseError, prepare  # noqa: E402

TARGET = 1.3


def _probe_note(artifacts: Path) -> str:
    """What the probe recorded (its index: events, steps seen, bytes written), in a few words."""
    index = artifacts / "collected" / "probe" / "index.json"
    try:
        data = json.loads(index.read_text(encoding="utf-8"))
        meta = data["meta"]
        return (f"{len(data['events'])} events, {meta.get('steps_seen')} steps seen, "
                f"{int(meta.get('bytes_written', 0)) / 2**20:.1f} MiB")
    except (OSError, ValueError, KeyError, TypeError):
        return "no probe index"


def _one(case: RealCase, repo: Path, artifacts: Path, probe: bool, timeout_s: float) -> tuple[float | None, str]:
    run = adapters.run(repo, case.run, device="cpu", redirect_cuda="cpu", probe=probe, profile=False,
                      timeout_s=timeout_s, seed=0, artifacts_dir=artifacts, env=dict(case.env))
    return (run.duration_s if run.ok else None), run.status


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mirror", type=Path, required=True, help="bare repositories, as for ferry eval real")
    ap.add_argument("--case", action="append", default=[], help="only this case (repeatable)")
    ap.add_argument("--repeats", type=int, default=2, help="pairs of runs per case (default 2)")
    ap.add_argument("--work", type=Path, default=None, help="where the checkouts go (default: a temporary dir)")
    args = ap.parse_args()
    suite = load_real().select(args.case or None)
    work = args.work or Path(tempfile.mkdtemp(prefix="ferry-probe-real-"))
    rows: list[tuple[str, float, float, float, str]] = []
    left_out: list[str] = []
    for case in suite.cases:
        assert isinstance(case, RealCase)
        try:
            repo = prepare(case, args.mirror, work / case.name / "checkout")
        except RealCaseError as exc:
            print(f"{case.name}: not prepared: {exc}")
            left_out.append(f"{case.name} (not prepared)")
            continue
        plain: list[float] = []
        probed: list[float] = []
        note, failed = "", ""
        _, status = _one(case, repo, work / case.name / "warm-up", False, case.timeout_s)  # caches, page cache
        failed = "" if status == "ok" else f"warm-up run {status}"
        for i in range(args.repeats if not failed else 0):
            took: dict[bool, float | None] = {}
            for probe in ((False, True) if i % 2 == 0 else (True, False)):
                adir = work / case.name / f"{'probed' if probe else 'plain'}-{i}"
                took[probe], status = _one(case, repo, adir, probe, case.timeout_s)
                if took[probe] is None:
                    failed = f"{'probed' if probe else 'plain'} run {status}"
                    break
                if probe:
                    note = _probe_note(adir)
            if failed:
                break
            plain.append(took[False] or 0.0)
            probed.append(took[True] or 0.0)
        if failed:
            print(f"{case.name}: {failed}; not measured")
            left_out.append(f"{case.name} ({failed})")
            continue
        ratios = [q / p for p, q in zip(plain, probed, strict=True)]
        row = (case.name, statistics.median(plain), statistics.median(probed), statistics.median(ratios), note)
        rows.append(row)
        print(f"{row[0]}: plain {row[1]:.1f}s, probed {row[2]:.1f}s, ratio {row[3]:.2f}x ({note})", flush=True)
    if not rows:
        print("no case measured: " + ", ".join(left_out))
        return 1
    print("\n| case | plain s | probed s | probed/plain |\n|---|---|---|---|")
    for name, p, q, r, _ in rows:
        print(f"| `{name}` | {p:.1f} | {q:.1f} | {r:.2f}x |")
    worst = max(rows, key=lambda r: r[3])
    met = worst[3] <= TARGET and not left_out
    print(f"\nlargest ratio {worst[3]:.2f}x ({worst[0]}) over {len(rows)} cases; target <= {TARGET}x on every case: "
          f"{'met' if met else 'NOT met'}" + (f"; not measured: {', '.join(left_out)}" if left_out else ""))
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
