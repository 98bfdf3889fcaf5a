"""Full OpInfo conformance sweep: tpx vs CPU, float32, "highest" matmul precision.

    .venv/bin/python benchmarks/conformance.py                 # full sweep, 2 workers
    .venv/bin/python benchmarks/conformance.py --ops add mm    # selected ops
    .venv/bin/python benchmarks/conformance.py --device cpu    # validate the harness (CPU vs CPU)

Prints one line per op that did not pass, the ops refused by design with their reason, the
counts and the agreement rate (pass / (pass + fail + unsupported); target >= 98%), and
writes the whole report as JSON (default: benchmarks/results/conformance.json).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

# Keep benchmarks/ (which holds a backend.py script) off sys.path so that `import backend`
# finds Ferry's backend package.
HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
sys.path.insert(0, str(ROOT))

from benchmarks.opinfo_sweep import (  # noqa: E402
    DEFAULT_MAX_SAMPLES,
    DEFAULT_OP_TIMEOUT_S,
    SweepReport,
    run_sweep,
)

TARGET = 0.98


def render(report: SweepReport) -> str:
    lines = [f"OpInfo conformance: {report.device} vs cpu, float32, matmul precision "
             f"{report.matmul_precision}, torch {report.torch_version}, {report.seconds:.0f} s", ""]
    for status in ("fail", "unsupported"):
        rows = [r for r in report.results if r.status == status]
        if rows:
            lines.append(f"{status.upper()} ({len(rows)}):")
            for r in rows:
                f = r.failure
                detail = f"sample {f.index} {f.sample}: {f.error}" if f else r.reason
                lines.append(f"  {r.key:<42} {detail[:400]}")
            lines.append("")
    refused = [r for r in report.results if r.status == "refused"]
    if refused:
        lines.append(f"REFUSED BY DESIGN ({len(refused)}), not counted:")
        lines += [f"  {r.key:<42} {r.reason}" for r in refused]
        lines.append("")
    partial = [r for r in report.results if r.status == "pass" and r.refused]
    if partial:
        lines.append(f"PASS with some samples refused by design ({len(partial)}):")
        lines += [f"  {r.key:<42} {r.reason}" for r in partial]
        lines.append("")
    skipped = [r for r in report.results if r.status == "skipped"]
    if skipped:
        lines.append(f"SKIPPED ({len(skipped)}), nothing to compare: "
                     + ", ".join(f"{r.key} ({r.reason[:40]})" for r in skipped))
        lines.append("")
    c = report.counts()
    lines.append("| status | ops |")
    lines.append("|---|---|")
    lines += [f"| {k} | {v} |" for k, v in c.items()]
    lines.append(f"| **total** | {len(report.results)} |")
    lines.append("")
    verdict = "meets" if report.agreement() >= TARGET else "BELOW"
    lines.append(f"agreement: {report.agreement() * 100:.2f}% of {c['pass'] + c['fail'] + c['unsupported']} "
                 f"compared ops ({verdict} the {TARGET * 100:.0f}% target)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="tpx", help="device compared against CPU (default tpx)")
    parser.add_argument("--ops", nargs="*", help="OpInfo keys (name or name.variant); default: all")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--max-samples", type=int, default=DEFAULT_MAX_SAMPLES)
    parser.add_argument("--timeout", type=float, default=DEFAULT_OP_TIMEOUT_S, help="seconds per op")
    parser.add_argument("--strict", action="store_true", help="tpx strict mode (data-dependent ops refused)")
    parser.add_argument("--json", type=Path, default=ROOT / "benchmarks" / "results" / "conformance.json",
                        help="where to write the JSON report")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        report = run_sweep(args.ops or None, args.device, args.jobs, args.max_samples,
                           args.timeout, args.strict)
    except KeyError as exc:
        print(f"conformance: error: {exc.args[0]}", file=sys.stderr)
        return 2
    print(render(report))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report.to_dict(), indent=1), encoding="utf-8")
    print(f"\nJSON report: {args.json}")
    return 0 if report.agreement() >= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
