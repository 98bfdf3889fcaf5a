"""target_run: the migrated workspace on tpx (no CUDA redirect), probed and profiled. tests: the tests on tpx.

The tests run once parity passes, so a parity fix (which changes the code again) does not cost a
second test run; any later edit sends the graph back through target_run, parity and tests.

Side by side (``agent.migration.runs``): when a core is free, target_run also starts this iteration's tests
beside the target run; the tests node then only collects them. Tests started for code that has
since changed are cancelled. The reference run is joined by the next node, ``await_reference``.
"""

from __future__ import annotations

import threading
from pathlib import Path

from agent.errors import FerryAgentError, ToolUnavailable
from agent.migration import adapters
from agent.migration.budget import ensure_time_for, has_time_for, run_timeout
from agent.migration.nodes.common import SUMMARY, Update, artifacts_dir, ensure_workspace, step
from agent.migration.nodes.cpu_check import cpu_check_key, cpu_check_label, run_cpu_check
from agent.migration.records import RunRecord
from agent.migration.runs import RunScheduler
from agent.migration.state import MigrationState, dump, iteration_of, migration_id_of, options_of
from tools.runner.models import RunResult


def _tests_label(state: MigrationState) -> str:
    """Names the tests run of this iteration's code (every applied edit starts a new iteration)."""
    return f"tests-{iteration_of(state)}"


def _tests_key(state: MigrationState) -> str:
    return f"{migration_id_of(state)}:{_tests_label(state)}"


def _run_tests(state: MigrationState, ws: Path, adir: Path, cancel: threading.Event | None) -> RunResult:
    opts = options_of(state)
    return adapters.run(ws, opts.test_command or "", device="tpx", redirect_cuda=None, probe=False, profile=False,
                       timeout_s=run_timeout(state), seed=opts.seed, artifacts_dir=adir, cancel=cancel,
                       disk_limit_bytes=opts.disk_limit_bytes)


@step("target_run")
def target_run(state: MigrationState, runs: RunScheduler) -> Update:
    opts = options_of(state)
    runs.prewarm_imports()  # parity and the profile report need torch in this process next
    runs.prewarm_runs(opts.seed)  # started by ingest unless this process resumed the migration
    ws = ensure_workspace(state)
    it = iteration_of(state)
    tests_key = _tests_key(state)
    cpu_key = cpu_check_key(state)
    runs.cancel_prefix(f"{migration_id_of(state)}:tests-", keep=tests_key)  # tests of older code
    runs.cancel_prefix(f"{migration_id_of(state)}:cpu-check-", keep=cpu_key)
    speculative = False
    ensure_time_for(state, "target", f"the target run of iteration {it}")
    if opts.test_command and not runs.has(tests_key) and runs.spare_cores() >= 2 and has_time_for(state, "tests"):
        adir = artifacts_dir(state, _tests_label(state))
        adir.mkdir(parents=True, exist_ok=True)
        speculative = runs.start(tests_key, lambda cancel: _run_tests(state, ws, adir, cancel))
    beside = ["tests"] if speculative else []
    if not runs.has(cpu_key) and runs.spare_cores() >= 2 and has_time_for(state, "cpu_check"):
        cdir = artifacts_dir(state, cpu_check_label(state))
        cdir.mkdir(parents=True, exist_ok=True)
        if runs.start(cpu_key, lambda cancel: run_cpu_check(state, ws, cdir, cancel)):
            beside.append("the CPU check")
    run = adapters.run(
        ws, opts.run_command, device="tpx", redirect_cuda=None, probe=True, profile=True,
        timeout_s=run_timeout(state), seed=opts.seed, artifacts_dir=artifacts_dir(state, f"target-{it}"),
        disk_limit_bytes=opts.disk_limit_bytes,
    )
    update: Update = {"workspace": str(ws), "runs": [dump(RunRecord.of("target", run))], "last_run": dump(run),
                      "last_phase": "run"}
    if not run.ok:
        runs.cancel(tests_key)  # these tests will never be collected
        runs.cancel(cpu_key)  # nor this CPU check
        update[SUMMARY] = f"run failed ({run.status})"
        return update
    update.update(_device_work(run))
    note = f" ({' and '.join(beside)} started beside it)" if beside else ""
    update.update({"target_ok": dump(run), SUMMARY: f"run ok in {run.duration_s:.1f}s{note}"})
    return update


def _device_work(run: RunResult) -> Update:
    """The passing target run's evidence of device work (its profile's op counts), or why there is none."""
    if run.profile_dir is None:
        return {"device_work": None, "device_work_error": "the target run left no profile"}
    try:
        work = adapters.device_work(run.profile_dir)
    except ToolUnavailable:
        raise
    except FerryAgentError as exc:
        return {"device_work": None, "device_work_error": str(exc)}
    return {"device_work": dump(work), "device_work_error": None}


@step("tests")
def tests(state: MigrationState, runs: RunScheduler) -> Update:
    opts = options_of(state)
    if not opts.test_command:
        return {SUMMARY: "no test command"}
    ws = ensure_workspace(state)
    adir = artifacts_dir(state, _tests_label(state))
    run = runs.join(_tests_key(state), adir)
    where = " (beside the target run)" if run is not None else ""
    if run is None:
        ensure_time_for(state, "tests", "the tests run")
        run = _run_tests(state, ws, adir, None)
    update: Update = {"runs": [dump(RunRecord.of("tests", run))], "last_run": dump(run), "last_phase": "test"}
    update[SUMMARY] = (f"tests pass in {run.duration_s:.1f}s{where}" if run.ok
                       else f"tests failed ({run.status}){where}")
    return update
