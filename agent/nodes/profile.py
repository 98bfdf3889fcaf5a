"""profile: the profiler's findings for the final code on tpx.

The passing target run was already profiled; its profile is used. Only when it has none (it was
cut short, or the profile dir is gone after a resume) does this node make one profiled run. A
failure to build the report is reported, not fatal: the migration itself is verified already.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from agent import toolbox
from agent.errors import ToolUnavailable
from agent.nodes.common import artifacts_dir, ensure_workspace, run_is_ok, run_summary, step
from agent.state import MigrationState, options_of

logger = logging.getLogger(__name__)


@step("profile")
def profile(state: MigrationState) -> dict[str, Any]:
    opts = options_of(state)
    ws = ensure_workspace(state)
    done = state.get("target_ok") or {}
    if done.get("profile_dir") and Path(done["profile_dir"]).is_dir() and any(Path(done["profile_dir"]).iterdir()):
        return _report(Path(done["profile_dir"]), ws, {"_summary": ""})
    run = toolbox.run(ws, opts.run_command, device="tpx", redirect_cuda=None, probe=False, profile=True,
                      timeout_s=opts.run_timeout_s, seed=opts.seed, artifacts_dir=artifacts_dir(state, "profile"),
                      disk_limit_bytes=opts.disk_limit_bytes)
    update: dict[str, Any] = {"runs": [run_summary("profile", run)]}
    pdir = run.get("profile_dir")
    if not run_is_ok(run):
        trace = run.get("trace") or {}
        msg = f"the profiled run failed ({run.get('status')}: {trace.get('exc_type', '')} {str(trace.get('message', ''))[:200]})"
        update.update({"profile": {"error": msg, "findings": []}, "_summary": msg})
        return update
    if not pdir or not Path(pdir).is_dir():
        update.update({"profile": None, "_summary": "the profiled run wrote no profile"})
        return update
    return _report(Path(pdir), ws, update)


def _report(pdir: Path, ws: Path, update: dict[str, Any]) -> dict[str, Any]:
    try:
        report = toolbox.profile_report(pdir, ws)
    except ToolUnavailable:
        raise
    except Exception as exc:  # a profiler bug must not undo a verified migration; it is reported
        logger.exception("building the profile report failed")
        msg = f"the profile report could not be built: {type(exc).__name__}: {exc}"
        update.update({"profile": {"error": msg, "findings": []}, "_summary": msg})
        return update
    n = len(report.get("findings") or [])
    update.update({"profile": report, "_summary": f"{n} profiler findings"})
    return update
