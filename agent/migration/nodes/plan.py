"""plan: what the codemods will change, what is left for review, what the target run checks.

Under --llm the model is also asked for its plan over the scan (``agent.llm.planner``): its order
of files and findings is what the report lists, its checks are recorded. A model failure here is
recorded in the plan (``Plan.model.error``) and the offline plan runs: it never ends the migration.
"""

from __future__ import annotations

from pathlib import Path

from agent.migration.entry import entry_file
from agent.migration.nodes.common import SUMMARY, Update, source_of, step
from agent.migration.records import ModelPlan, Plan, ScanDigest
from agent.migration.runs import RunScheduler
from agent.migration.state import MigrationState, dump, llm_option, options_of, scan_of
from tools.patch import list_source_files

AUTO = "auto"  # the scan's category of idioms the codemods rewrite (tools.scan.models.Category)


def _model_plan(state: MigrationState, scan: ScanDigest, offline: Plan) -> tuple[ModelPlan, dict[str, float]]:
    """The model's validated plan (or why there is none) and the LLM usage it cost."""
    from agent.errors import FerryAgentError
    from agent.llm.client import model_client
    from agent.llm.planner import ask_plan

    try:
        client = model_client(state, "plan")
    except FerryAgentError as exc:
        return ModelPlan(error=f"{exc.status}: {exc}"), {}
    return ask_plan(client, scan, offline), client.counters()


def offline_plan(scan: ScanDigest, source: Path, *, run_command: str | None, test_command: str | None, device: str,
                 max_iterations: int, cwd: str | None = None) -> Plan:
    """The plan without a model: the files the codemods rewrite, the findings left for review, the checks."""
    auto = [f for f in scan.findings if f.category == AUTO]
    return Plan(
        rewrite_files=sorted({f.file for f in auto}), auto_fix=len(auto),
        review=[f for f in scan.findings if f.category != AUTO],
        entry_file=entry_file(run_command, list_source_files(source), cwd) if run_command else None,
        codemod_device=device, checks=["run"] + (["tests"] if test_command else []) + ["parity", "profile"],
        max_iterations=max_iterations,
    )


def plan_summary(the_plan: Plan) -> str:
    return (f"codemods on {len(the_plan.rewrite_files)} files ({the_plan.auto_fix} sites); "
            f"{len(the_plan.review)} findings for review")


@step("plan")
def plan(state: MigrationState, runs: RunScheduler) -> Update:
    opts = options_of(state)
    scan = scan_of(state) or ScanDigest()
    the_plan = offline_plan(scan, source_of(state), run_command=opts.run_command, test_command=opts.test_command,
                            device=opts.device, max_iterations=opts.max_iterations, cwd=opts.cwd)
    summary = plan_summary(the_plan)
    update: Update = {}
    if llm_option(state):
        model, usage = _model_plan(state, scan, the_plan)
        the_plan = the_plan.model_copy(update={"model": model})
        update["llm_usage"] = usage
        dropped = f" ({len(model.warnings)} names dropped)" if model.warnings else ""
        summary += (f"; model's plan: {len(model.files)} files, {len(model.findings)} findings, "
                    f"{len(model.verify)} checks{dropped}" if model.ok else
                    f"; the model's plan failed ({model.error}): the offline plan runs")
    return {**update, "plan": dump(the_plan), SUMMARY: summary}
