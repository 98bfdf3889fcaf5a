"""target_run: the migrated workspace on tpx (no CUDA redirect), probed and profiled. tests: the tests on tpx.

The tests run once parity passes, so a parity fix (which changes the code again) does not cost a
second test run; any later edit sends the graph back through target_run, parity and tests.

Side by side (``agent.background``): target_run joins the reference run, which has been going on
since the start, once its own run ends. When a core is free, it also starts this iteration's
tests beside the target run; the tests node then only collects them. Tests started for code that
has since changed are cancelled.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

from agent import background, toolbox
from agent.nodes.common import artifacts_dir, ensure_workspace, run_is_ok, run_summary, step
from agent.nodes.reference import join_reference
from agent.state import MigrationState, options_of

logger = logging.getLogger(__name__)


def _tests_label(state: MigrationState) -> str:
    """Names the tests run of this iteration's code (every applied edit starts a new iteration)."""
    return f"tests-{state.get('iteration') or 0}"


def _tests_key(state: MigrationState) -> str:
    return f"{state['migration_id']}:{_tests_label(state)}"


def _run_tests(state: MigrationState, ws: Path, adir: Path, cancel: threading.Event | None) -> dict[str, Any]:
    opts = options_of(state)
    return toolbox.run(ws, opts.test_command or "", device="tpx", redirect_cuda=None, probe=False, profile=False,
                       timeout_s=opts.run_timeout_s, seed=opts.seed, artifacts_dir=adir, cancel=cancel,
                       disk_limit_bytes=opts.disk_limit_bytes)


@step("target_run")
def target_run(state: MigrationState) -> dict[str, Any]:
    opts = options_of(state)
    background.prewarm()  # parity and the profile report need torch in this process next
    toolbox.prewarm_runs(opts.seed)  # started by ingest unless this process resumed the migration
    ws = ensure_workspace(state)
    it = state.get("iteration") or 0
    tests_key = _tests_key(state)
    background.cancel_prefix(f"{state['migration_id']}:tests-", keep=tests_key)  # tests of older code
    speculative = False
    if opts.test_command and not background.has(tests_key) and background.spare_cores() >= 2:
        adir = artifacts_dir(state, _tests_label(state))
        adir.mkdir(parents=True, exist_ok=True)
        speculative = background.start(tests_key, lambda cancel: _run_tests(state, ws, adir, cancel))
    run = toolbox.run(
        ws, opts.run_command, device="tpx", redirect_cuda=None, probe=True, profile=True,
        timeout_s=opts.run_timeout_s, seed=opts.seed, artifacts_dir=artifacts_dir(state, f"target-{it}"),
        disk_limit_bytes=opts.disk_limit_bytes,
    )
    ref_update = join_reference(state)
    update: dict[str, Any] = {"workspace": str(ws), "runs": ref_update.get("runs", []) + [run_summary("target", run)],
                              "last_run": {**run, "phase": "run"}}
    if "reference" in ref_update:
        update["reference"] = ref_update["reference"]
    ok = run_is_ok(run)
    if not ok or ref_update.get("status"):  # these tests will never be collected
        background.cancel(tests_key)
    if ref_update.get("status"):  # the original code does not run: that ends the migration first
        update.update({"status": ref_update["status"], "summary": ref_update["summary"],
                       "_summary": f"target run {'ok' if ok else 'failed'}; {ref_update['_summary']}"})
        return update
    note = " (tests started beside it)" if speculative and ok else ""
    if ok:
        update.update({"target_ok": run, "_summary": f"run ok in {run.get('duration_s', 0):.1f}s{note}"})
    else:
        update["_summary"] = f"run failed ({run.get('status')})"
    return update


@step("tests")
def tests(state: MigrationState) -> dict[str, Any]:
    opts = options_of(state)
    if not opts.test_command:
        return {"_summary": "no test command"}
    ws = ensure_workspace(state)
    adir = artifacts_dir(state, _tests_label(state))
    run = background.join(_tests_key(state), adir)
    where = " (beside the target run)" if run is not None else ""
    if run is None:
        run = _run_tests(state, ws, adir, None)
    update: dict[str, Any] = {"runs": [run_summary("tests", run)], "last_run": {**run, "phase": "test"}}
    update["_summary"] = (f"tests pass in {run.get('duration_s', 0):.1f}s{where}" if run_is_ok(run)
                          else f"tests failed ({run.get('status')}){where}")
    return update
