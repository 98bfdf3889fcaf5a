"""plan: what the codemods will change, what is left for review, what the target run checks."""

from __future__ import annotations

import logging
from typing import Any

from agent.nodes.common import entry_file, source_of, step
from agent.state import MigrationState, options_of
from tools.patch import list_source_files

logger = logging.getLogger(__name__)

AUTO = ("auto_fix", "auto", "autofix", "auto_fixable")


@step("plan")
def plan(state: MigrationState) -> dict[str, Any]:
    opts = options_of(state)
    findings = (state.get("scan") or {}).get("findings", [])
    auto = [f for f in findings if f["category"] in AUTO]
    review = [f for f in findings if f["category"] not in AUTO]
    files = sorted({f["file"] for f in auto if f.get("file")})
    known = list_source_files(source_of(state))
    the_plan = {
        "rewrite_files": files,
        "auto_fix": len(auto),
        "review": review,
        "entry_file": entry_file(opts.run_command, known),
        "target": "tpx",
        "codemod_device": opts.device,
        "checks": ["run"] + (["tests"] if opts.test_command else []) + ["parity", "profile"],
        "max_iterations": opts.max_iterations,
    }
    return {"plan": the_plan,
            "_summary": f"codemods on {len(files)} files ({len(auto)} sites); {len(review)} findings for review"}
