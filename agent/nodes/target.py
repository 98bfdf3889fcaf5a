"""target_run: the migrated workspace on tpx (no CUDA redirect), probed and profiled; then the tests."""

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
    update: dict[str, Any] = {"workspace": str(ws), "runs": [run_summary("target", run)]}
    if not run_is_ok(run):
        update.update({"last_run": {**run, "phase": "run"}, "_summary": f"run failed ({run.get('status')})"})
        return update
    if opts.test_command:
        tests = toolbox.run(
            ws, opts.test_command, device="tpx", redirect_cuda=None, probe=False, profile=False,
            timeout_s=opts.run_timeout_s, seed=opts.seed, artifacts_dir=artifacts_dir(state, f"tests-{it}"),
        )
        update["runs"].append(run_summary("tests", tests))
        if not run_is_ok(tests):
            update.update({"last_run": {**tests, "phase": "test"}, "target_ok": run,
                           "_summary": f"run ok; tests failed ({tests.get('status')})"})
            return update
    update.update({"last_run": {**run, "phase": "run"}, "target_ok": run,
                   "_summary": f"run ok in {run.get('duration_s', 0):.1f}s" + ("; tests pass" if opts.test_command else "")})
    return update
