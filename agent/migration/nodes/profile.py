"""profile: the profiler's findings for the final code on tpx.

The passing target run was already profiled; its profile is used. Only when it has none (it was
cut short, or the profile dir is gone after a resume) does this node make one profiled run. A
failure to build the report is reported (``profile_error``), not fatal: the migration itself is
verified already.
"""

from __future__ import annotations

import logging
from pathlib import Path

from agent.errors import ToolUnavailable
from agent.migration import adapters
from agent.migration.budget import has_time_for, run_timeout
from agent.migration.nodes.common import SUMMARY, Update, artifacts_dir, ensure_workspace, step
from agent.migration.records import RunRecord
from agent.migration.runs import RunScheduler
from agent.migration.state import MigrationState, dump, options_of, target_ok_of

logger = logging.getLogger(__name__)


def _has_profile(pdir: Path | None) -> bool:
    return pdir is not None and pdir.is_dir() and any(pdir.iterdir())


@step("profile")
def profile(state: MigrationState, runs: RunScheduler) -> Update:
    opts = options_of(state)
    ws = ensure_workspace(state)
    done = target_ok_of(state)
    if done is not None and _has_profile(done.profile_dir):
        assert done.profile_dir is not None
        return _report(done.profile_dir, ws, runs, {})
    if not has_time_for(state, "profile"):
        msg = "not profiled: the wall-time budget (--max-wall) left too little time for a profiled run"
        return {"profile": None, "profile_error": msg, SUMMARY: msg}
    run = adapters.run(ws, opts.run_command, device="tpx", redirect_cuda=None, probe=False, profile=True,
                      timeout_s=run_timeout(state), seed=opts.seed, artifacts_dir=artifacts_dir(state, "profile"),
                      disk_limit_bytes=opts.disk_limit_bytes)
    update: Update = {"runs": [dump(RunRecord.of("profile", run))]}
    if not run.ok:
        msg = f"the profiled run failed ({run.failure_line()[:300]})"
        update.update({"profile": None, "profile_error": msg, SUMMARY: msg})
        return update
    if run.profile_dir is None or not run.profile_dir.is_dir():
        msg = "the profiled run wrote no profile"
        update.update({"profile": None, "profile_error": msg, SUMMARY: msg})
        return update
    assert run.profile_dir is not None
    return _report(run.profile_dir, ws, runs, update)


def _report(pdir: Path, ws: Path, runs: RunScheduler, update: Update) -> Update:
    runs.wait_prewarm()
    try:
        report = adapters.profile_report(pdir, ws)
    except ToolUnavailable:
        raise
    except Exception as exc:
        logger.exception("building the profile report failed")
        msg = f"the profile report could not be built: {type(exc).__name__}: {exc}"
        update.update({"profile": None, "profile_error": msg, SUMMARY: msg})
        return update
    update.update({"profile": dump(report), "profile_error": None,
                   SUMMARY: f"{len(report.findings)} profiler findings"})
    return update
