"""profile: the profiler's findings for the passing target run."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from agent import toolbox
from agent.nodes.common import ensure_workspace, step
from agent.state import MigrationState

logger = logging.getLogger(__name__)


@step("profile")
def profile(state: MigrationState) -> dict[str, Any]:
    tgt = state.get("target_ok") or {}
    pdir = tgt.get("profile_dir")
    if not pdir or not Path(pdir).is_dir():
        return {"profile": None, "_summary": "no profile collected by the target run"}
    report = toolbox.profile_report(Path(pdir), ensure_workspace(state))
    n = len(report.get("findings") or [])
    return {"profile": report, "_summary": f"{n} profiler findings"}
