"""target_run: the migrated workspace on tpx (no CUDA redirect), probed and profiled. tests: the tests on tpx.

The tests run once parity passes, so a parity fix (which changes the code again) does not cost a
second test run; any later edit sends the graph back through target_run, parity and tests.
"""

from __future__ import annotations

import logging
from typing import Any

from agent import toolbox
from agent.nodes.common import artifacts_dir, ensure_workspace, run_is_ok, run_summary, step
from agent.state import MigrationState, options_of

logger = logging.getLogger(__name__)


@step("target_run")
def target_run(state: MigrationState) -> dict[str, Any]:
    opts = options_of(state)
    ws = ensure_workspace(state)
    it = state.get("iteration") or 0
    run = toolbox.run(
        ws, opts.run_command, device="tpx", redirect_cuda=None, probe=True, profile=True,
        timeout_s=opts.run_timeout_s, seed=opts.seed, artifacts_dir=artifacts_dir(state, f"target-{it}"),
    )
    update: dict[str, Any] = {"workspace": str(ws), "runs": [run_summary("target", run)],
                              "last_run": {**run, "phase": "run"}}
    if run_is_ok(run):
        update.update({"target_ok": run, "_summary": f"run ok in {run.get('duration_s', 0):.1f}s"})
    else:
        update["_summary"] = f"run failed ({run.get('status')})"
    return update


@step("tests")
def tests(state: MigrationState) -> dict[str, Any]:
    opts = options_of(state)
    if not opts.test_command:
        return {"_summary": "no test command"}
    ws = ensure_workspace(state)
    it = state.get("iteration") or 0
    run = toolbox.run(
        ws, opts.test_command, device="tpx", redirect_cuda=None, probe=False, profile=False,
        timeout_s=opts.run_timeout_s, seed=opts.seed, artifacts_dir=artifacts_dir(state, f"tests-{it}"),
    )
    update: dict[str, Any] = {"runs": [run_summary("tests", run)], "last_run": {**run, "phase": "test"}}
    update["_summary"] = (f"tests pass in {run.get('duration_s', 0):.1f}s" if run_is_ok(run)
                          else f"tests failed ({run.get('status')})")
    return update
