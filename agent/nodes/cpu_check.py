"""cpu_check: the CPU guard. The migrated code must still run on CPU, as the original did, with the
reference run's results, before a migration is ``migrated``.

The run: the migrated workspace with device ``cpu`` and no CUDA redirect, so no accelerator is
available to it (the runner turns off the backend autoload: tpx is not registered and
``torch.accelerator`` has nothing to offer), probe on. Its probe dump is compared with the reference
run's (the original on CPU under the CUDA redirect) at the CPU tier: every compared tensor must
pass within ``torch.testing.assert_close``'s tolerances for its dtype (same device, same seed);
a tensor that passes only by the looser cosine or tiered checks of a reduced-precision target
fails the guard. The node records a :class:`agent.records.CpuCheck`; the report node turns a
failed guard into ``partial`` with its reason.

Side by side (``agent.runs``): ``target_run`` starts this run beside itself when a core is free;
this node then only collects it.
"""

from __future__ import annotations

import threading
from pathlib import Path

from agent import toolbox
from agent.errors import FerryAgentError, ToolUnavailable
from agent.nodes.common import SUMMARY, Update, artifacts_dir, ensure_workspace, step
from agent.records import CpuCheck, RunRecord
from agent.runs import RunScheduler
from agent.state import MigrationState, dump, options_of, reference_of
from tools.runner.models import RunResult

CPU_TIER = "assert_close"  # the tier a same-device comparison must pass at (tools/parity/metrics.py)


def cpu_check_label(state: MigrationState) -> str:
    """Names the CPU check of this iteration's code (every applied edit starts a new iteration)."""
    return f"cpu-check-{state.get('iteration') or 0}"


def cpu_check_key(state: MigrationState) -> str:
    return f"{state['migration_id']}:{cpu_check_label(state)}"


def run_cpu_check(state: MigrationState, ws: Path, adir: Path, cancel: threading.Event | None) -> RunResult:
    opts = options_of(state)
    return toolbox.run(ws, opts.run_command, device="cpu", redirect_cuda=None, probe=True, profile=False,
                       timeout_s=opts.run_timeout_s, seed=opts.seed, artifacts_dir=adir, cancel=cancel,
                       disk_limit_bytes=opts.disk_limit_bytes)


def _check(run: RunResult, passed: bool, reason: str, compared: int = 0, first: str | None = None) -> CpuCheck:
    return CpuCheck(passed=passed, reason=reason, run_status=run.status, duration_s=run.duration_s,
                    compared=compared, first_divergence=first)


def judge(state: MigrationState, run: RunResult, runs: RunScheduler) -> CpuCheck:
    """The guard's verdict on ``run`` (the migrated code on CPU) against the reference run."""
    if not run.ok:
        return _check(run, False, f"the migrated code no longer runs on CPU: {run.failure_line()[:400]}")
    ref = reference_of(state)
    ref_dir, cpu_dir = (ref.probe_dir if ref is not None else None), run.probe_dir
    if ref_dir is None or cpu_dir is None or not ref_dir.is_dir() or not cpu_dir.is_dir():
        return _check(run, False, (
            f"the migrated code runs on CPU, but its results could not be compared with the reference run "
            f"(probe dumps: reference {ref_dir or 'none'}, CPU run {cpu_dir or 'none'})"))
    runs.wait_prewarm()
    try:
        report = toolbox.compare(ref_dir, cpu_dir)
    except ToolUnavailable:
        raise
    except FerryAgentError as exc:
        return _check(run, False, f"the migrated code runs on CPU, but {exc}")
    rows = [t for t in report.rows() if t.verdict != "skipped"]
    loose = [t for t in rows if t.verdict != "pass" or t.tier != CPU_TIER]
    if report.failed or loose:
        first = report.divergence_text() if report.failed else f"{loose[0].key} ({loose[0].tier}: {loose[0].reason})"
        return _check(run, False, (
            f"the migrated code runs on CPU but changes its numbers: {len(loose)} of {len(rows)} compared "
            f"tensors differ from the reference run beyond assert_close (first: {first})"), len(rows), first)
    what = f"{len(rows)} compared tensors match the reference run" if rows else "nothing to compare"
    return _check(run, True, f"runs on CPU; {what}", len(rows))


@step("cpu_check")
def cpu_check(state: MigrationState, runs: RunScheduler) -> Update:
    ws = ensure_workspace(state)
    adir = artifacts_dir(state, cpu_check_label(state))
    run = runs.join(cpu_check_key(state), adir)
    where = " (beside the target run)" if run is not None else ""
    if run is None:
        run = run_cpu_check(state, ws, adir, None)
    check = judge(state, run, runs)
    return {"runs": [dump(RunRecord.of("cpu_check", run))], "cpu_check": dump(check),
            SUMMARY: f"{'pass' if check.passed else 'fail'}: {check.reason} in {run.duration_s:.1f}s{where}"}
