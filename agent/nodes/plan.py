"""plan: what the codemods will change, what is left for review, what the target run checks."""

from __future__ import annotations

from agent.entry import entry_file
from agent.nodes.common import SUMMARY, Update, source_of, step
from agent.records import Plan, ScanDigest
from agent.runs import RunScheduler
from agent.state import MigrationState, dump, options_of, scan_of
from tools.patch import list_source_files

AUTO = "auto"  # the scan's category of idioms the codemods rewrite (tools.scan.models.Category)


@step("plan")
def plan(state: MigrationState, runs: RunScheduler) -> Update:
    opts = options_of(state)
    findings = (scan_of(state) or ScanDigest()).findings
    auto = [f for f in findings if f.category == AUTO]
    review = [f for f in findings if f.category != AUTO]
    files = sorted({f.file for f in auto})
    the_plan = Plan(
        rewrite_files=files, auto_fix=len(auto), review=review,
        entry_file=entry_file(opts.run_command, list_source_files(source_of(state)), opts.cwd),
        codemod_device=opts.device, checks=["run"] + (["tests"] if opts.test_command else []) + ["parity", "profile"],
        max_iterations=opts.max_iterations,
    )
    return {"plan": dump(the_plan),
            SUMMARY: f"codemods on {len(files)} files ({len(auto)} sites); {len(review)} findings for review"}
