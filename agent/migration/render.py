"""The one renderer of a migration: result.json (``MigrationRecord``), report.md, and the pull-request text.

report.md and pr.md share their sections (status, edits, the parity table with its metrics, the
profile findings as ``file:line  title``, what is left for a human), built from the typed state:
the tools' models (``ParityReport``, ``ProfileReport``) and the agent's records. Text that a run
chose (summaries quoting trace messages, probe keys, finding titles) is escaped where it lands
(``tools.textsafe``).
"""

from __future__ import annotations

import re

from agent.migration.records import (
    Edit,
    EditSummary,
    GuardDecision,
    GuardOutcome,
    LLMUsage,
    MigrationRecord,
    ParityOutcome,
    Plan,
    ProfileChange,
    ProfileOutcome,
    ReviewItem,
    ScanDigest,
)
from agent.migration.state import (
    MigrationOptions,
    State,
    cpu_check_of,
    device_work_error_of,
    device_work_of,
    edits_of,
    elapsed_of,
    guard_events_of,
    iteration_of,
    llm_counters_of,
    migration_id_of,
    options_of,
    parity_of,
    plan_of,
    profile_error_of,
    profile_of,
    profile_round_of,
    reference_collected_of,
    reference_tests_of,
    runs_made_of,
    runs_of,
    scan_of,
    status_of,
    steps_of,
    summary_of,
    tests_after_of,
)
from agent.settings import settings
from tools.guard.models import CollectedTests, TestsSnapshot
from tools.parity.models import ParityReport, TensorComparison
from tools.patch import FileChange
from tools.profile.models import ProfileReport
from tools.textsafe import md_code, md_inline

PARITY_ROWS = 30
PROFILE_ROWS = 15


# --- result.json -----------------------------------------------------------------------------


def parity_outcome(report: ParityReport | None) -> ParityOutcome:
    if report is None:
        return ParityOutcome()
    return ParityOutcome(verdict=report.verdict, passed=report.passed if report.compared else None,
                         summary=report.summary,
                         first_divergence=report.divergence_text() if report.failed else None,
                         trials=report.trials, explained_by=report.explained_by, measured=report.measured() or None,
                         headline=report.headline())


def llm_usage_of(state: State) -> LLMUsage:
    """The model's use over the whole migration, with its estimated cost."""
    from agent.llm.client import Usage
    from agent.llm.prices import estimated_cost

    usage = Usage.of_counters(llm_counters_of(state))
    opts = options_of(state)
    model = (opts.llm_model or settings().llm.model) if opts.llm or usage.calls else None
    return LLMUsage(calls=usage.calls, prompt_tokens=usage.prompt_tokens, completion_tokens=usage.completion_tokens,
                    total_tokens=usage.tokens, retries=usage.retries, wall_s=round(usage.wall_s, 3),
                    failures=usage.failures, model=model,
                    cost_usd=estimated_cost(model, usage.prompt_tokens, usage.completion_tokens))


def llm_usage_line(usage: LLMUsage) -> str:
    """report.md's line on the model: calls, tokens, retries, failures by kind, estimated cost."""
    cost = (f"${usage.cost_usd:.4f}" if usage.cost_usd is not None
            else f"unknown (no price for {md_code(usage.model or '(no model)')})")
    failures = ", ".join(f"{md_inline(k)} {n}" for k, n in sorted(usage.failures.items())) or "none"
    return (f"- model {md_code(usage.model or '(none)')}: {usage.calls} calls, {usage.total_tokens} tokens "
            f"({usage.prompt_tokens} prompt, {usage.completion_tokens} completion), {usage.retries} retries, "
            f"failed requests: {failures}, estimated cost: {cost}")


def result_of(state: State, patch_files: list[FileChange], applied: bool | None = None) -> MigrationRecord:
    opts = options_of(state)
    profile, profile_error = profile_of(state), profile_error_of(state)
    status, plan, rnd = status_of(state), plan_of(state), profile_round_of(state)
    if status is None:
        raise ValueError("a migration's result needs its status (the report node decides it)")
    return MigrationRecord(
        migration_id=migration_id_of(state), status=status, summary=summary_of(state),
        source=opts.source, run_command=opts.run_command, test_command=opts.test_command,
        python=opts.python, env=dict(opts.env), cwd=opts.cwd, entry_file=plan.entry_file if plan else None,
        iterations=iteration_of(state), runs=len(runs_made_of(state)), run_log=runs_of(state),
        llm=llm_usage_of(state),
        wall_time_s=round(elapsed_of(state), 3),
        edits=[EditSummary(step=e.step, kind=e.kind, rule=e.rule, by=e.by, site=e.site, files=e.files,
                           reason=e.reason) for e in edits_of(state)],
        patch_files=patch_files, parity=parity_outcome(parity_of(state)),
        profile=ProfileOutcome(findings=len(profile.findings) if profile else 0, error=profile_error),
        plan_source="model" if plan is not None and plan.model is not None and plan.model.ok else "offline",
        model_plan=plan.model if plan is not None else None,
        profile_change=ProfileChange(outcome=rnd.phase, findings=rnd.findings, summary=rnd.summary, files=rnd.files,
                                     reason=rnd.reason) if rnd is not None else None,
        device_work=device_work_of(state), cpu_check=cpu_check_of(state), guard=guard_outcome(state),
        steps=steps_of(state), applied=applied,
    )


def guard_outcome(state: State) -> GuardOutcome:
    """The tests before and after, and the test guard's decisions."""
    before = reference_tests_of(state)
    return GuardOutcome(tests_before=before, tests_after=tests_after_of(state),
                        tests_before_collected=reference_collected_of(state) if before is None else None,
                        events=guard_events_of(state))


# --- shared sections ---------------------------------------------------------------------------


def before_line(before: TestsSnapshot | None, collected: CollectedTests | None) -> str:
    """The tests on the original as the report says them: their outcomes, or that they were only collected."""
    if before is not None:
        return before.line()
    if collected is not None:
        return (f"collected {collected.collected}, not run (every test passes on the migrated code and none is "
                "lost)")
    return "not run"


def guard_section(state: State, link: bool = True) -> list[str]:
    """The test guard (docs/guard.md): the tests collected and passed before and after, and each finding
    refused, accepted by approval, or let through as the documented exception (``link``: the doc as a link;
    the pull request's text, read in another repository, names it as Ferry's instead)."""
    from tools.doclinks import GUARD

    guard = guard_outcome(state)
    before, after = guard.tests_before, guard.tests_after
    doc = f"[{GUARD}]({GUARD})" if link else f"`{GUARD}` in Ferry's documentation"
    lines = [f"How edits are held to the tests: {doc}", ""]
    collected = guard.tests_before_collected
    if before is None and after is None:
        lines.append("- tests: none ran (no test command, or the migration stopped before its tests)")
    else:
        lines.append(f"- tests before (the original, CUDA on CPU): {before_line(before, collected)}")
        lines.append(f"- tests after (the migrated code on tpx): {after.line() if after else 'not run'}")
        why = next((s.coverage_error for s in (before, after) if s is not None and s.coverage_error), None)
        if why:  # asked for (--coverage, or the repository's configuration) and not measured
            lines.append(f"- line coverage: not measured: {md_inline(why, keep_code=True)} (Ferry installs nothing "
                         "into the runs' interpreter)")
    said: dict[GuardDecision, str] = {"refused": "refused", "accepted": "accepted by approval",
                                      "exception": "documented exception"}
    for event in guard.events:
        lines.append(f"- {said[event.decision]}: {md_inline(event.line(), keep_code=True)}"
                     + (f" ({event.step})" if event.step else ""))
    if not guard.events:
        lines.append("- no edit removed, skipped or loosened a test")
    return lines


def _num(value: float | None) -> str:
    return "" if value is None else f"{value:.3g}"


def _row(t: TensorComparison) -> str:
    m = t.metrics
    cells = [md_code(t.key, table=True), _num(m.cosine if m else None), _num(m.max_abs if m else None),
             _num(m.max_rel if m else None), md_inline(t.tier, table=True), md_inline(t.verdict, table=True)]
    return "| " + " | ".join(cells) + " |"


def parity_table(report: ParityReport, limit: int = PARITY_ROWS,
                 rows: list[TensorComparison] | None = None) -> list[str]:
    """One row per compared tensor (module outputs and inputs, then printed scalars), with the metrics
    it was judged on; failing rows first."""
    rows = report.rows() if rows is None else rows
    if not rows:
        return ["(no tensors or metrics were compared)"]
    order = {"fail": 0, "warn": 1, "pass": 2, "skipped": 3}
    rows = sorted(rows, key=lambda t: order.get(t.verdict, 4))
    out = ["| tensor | cosine | max abs | max rel | tier | verdict |", "|---|---|---|---|---|---|"]
    out += [_row(t) for t in rows[:limit]]
    if len(rows) > limit:
        out.append(f"| ... {len(rows) - limit} more | | | | | |")
    return out


WORST_ROWS = 5


def notable_rows(report: ParityReport) -> list[TensorComparison]:
    """The rows worth showing before the full table: the failing and warning ones, else the worst few."""
    rows = [t for t in report.rows() if t.verdict in ("fail", "warn")]
    if rows:
        return rows
    judged = [t for t in report.rows() if t.metrics is not None]
    return sorted(judged, key=lambda t: t.metrics.max_abs if t.metrics else 0.0, reverse=True)[:WORST_ROWS]


def parity_section(report: ParityReport | None) -> list[str]:
    """One line first (``ParityReport.headline``), the measurements, then only the failing (or worst)
    rows, then the full table folded."""
    if report is None:
        return ["Not checked (the migration stopped before the parity step)."]
    if not report.compared:
        return ["Verdict: **nothing to compare**: the program ran no `nn.Module`, printed no metric, saved no "
                "tensor, left none at top level and recorded nothing, so parity could not be shown either way.", "",
                md_inline(report.summary, keep_code=True)]
    lines = [f"**{md_inline(report.headline())}**", "",
             "Counts: " + ", ".join(f"{n} {k}" for k, n in report.counts.items() if n)]
    if report.failed:
        lines.append(f"First divergence: {md_inline(report.divergence_text())}")
    for trial in report.trials:
        lines.append(f"- measured ({trial.cause}, against the {trial.against}): {md_inline(trial.describe())}")
    if report.golden is not None:
        lines.append(f"Error ratio: {md_inline(report.golden.describe())}")
    if report.drift is not None and (report.drift.judged or report.drift.curves_judged or report.drift.note):
        lines.append(f"Training: {md_inline(report.drift.describe().removeprefix('training: '))} (step 0 strictly, "
                     "later steps against the drift budget: docs/parity.md)")
    notable = notable_rows(report)
    title = "Failing and warning tensors" if any(t.verdict != "pass" for t in notable) else "The worst tensors"
    lines += ["", f"{title}:", "", *parity_table(report, rows=notable)]
    if len(notable) < len(report.rows()):  # else the table above is all of them
        lines += ["", f"<details><summary>All {len(report.rows())} compared tensors</summary>", "",
                  *parity_table(report), "", "</details>"]
    return lines


def device_work_section(state: State) -> list[str]:
    """How much of the target run's work ran on tpx (the evidence ``migrated`` needs)."""
    work = device_work_of(state)
    if work is None:
        why = device_work_error_of(state)
        return [f"Not measured{': ' + md_inline(why, keep_code=True) if why else ''}."]
    scope = {"through_window": "from the start of the run through the profiled steps",
             "run": "over the whole run"}.get(work.scope or "", "")
    share = "n/a" if work.tpx_share is None else f"{work.tpx_share:.1%}"
    compute = "n/a (the run dispatched none)" if work.compute_share is None else (
        f"{work.compute_tpx_ops} of {work.compute_ops} ({work.compute_share:.1%})")
    return [f"- aten ops on tpx: {work.tpx_ops} of {work.total_ops} ({share}){', ' + scope if scope else ''}",
            f"- compute ops (matmul, convolution, attention, RNN, embedding, loss) on tpx: {compute}",
            f"- aten ops tpx itself executed over the whole run, set-up and teardown included (its own counter, "
            f"not the profiler's): {work.run_tpx_ops}"]


def cpu_check_section(state: State, timings: bool = True) -> list[str]:
    """The CPU guard: the migrated code on CPU against the reference run (``timings``: with the run's
    seconds; the pull request's text has none, so a re-run with the same result writes the same text)."""
    check = cpu_check_of(state)
    if check is None:
        return ["Not run (the migration stopped before it)."]
    verdict = check.verdict.replace("_", " ")
    took = f", {check.duration_s:.1f}s" if timings else ""
    return [f"Verdict: **{verdict}** ({check.run_status}{took}): {md_inline(check.reason, keep_code=True)}"]


def finding_line(where: str | None, title: str, suggestion: str) -> str:
    """A profile finding: ``file:line  title``, then its suggestion."""
    loc = md_code(where) if where else "(no source line)"
    return f"- {loc}  {md_inline(title, keep_code=True)} — {md_inline(suggestion, keep_code=True)}"


def profile_section(report: ProfileReport | None, error: str | None, limit: int = PROFILE_ROWS) -> list[str]:
    if error:
        return [f"Profiling failed: {md_inline(error, keep_code=True)}"]
    if report is None:
        return ["(no profile)"]
    if not report.findings:
        return ["No findings."]
    out = [finding_line(f.where(), f.title, f.suggestion) for f in report.findings[:limit]]
    if len(report.findings) > limit:
        out.append(f"- ... {len(report.findings) - limit} more in profile.md")
    return out


def review_line(item: ReviewItem) -> str:
    return (f"- {md_code(f'{item.file}:{item.line}')} [{item.rule}, {item.category}] "
            f"{md_inline(item.message, keep_code=True)}")


def left_for_human(state: State) -> list[str]:
    status = status_of(state)
    left = []
    if status != "migrated":
        left.append(f"- The migration ended with **{status}**: {md_inline(summary_of(state) or '', keep_code=True)}")
    plan = plan_of(state)
    left += [review_line(item) for item in (plan.ordered_review(scan_of(state)) if plan else [])]
    return left or ["Nothing."]


def _plan_lines(plan: Plan, scan: ScanDigest | None) -> list[str]:
    """The offline plan, then the model's (under --llm): its order, checks and dropped names, or why
    there is none."""
    files = ", ".join(md_code(f) for f in plan.rewrite_files) or "none"
    lines = ["### Plan (offline)", "", f"- codemods on: {files} ({plan.auto_fix} sites)",
             f"- checks: {', '.join(plan.checks)}", f"- findings for review: {len(plan.review)}"]
    model = plan.model
    if model is None:
        return lines
    lines += ["", "### Plan (model)", ""]
    if not model.ok:
        why = md_inline(model.error or "", keep_code=True)
        return [*lines, f"The model's plan failed, so the offline plan ran: {why}"]
    ids = scan.ids() if scan is not None else {}
    lines.append("- files in order: " + (", ".join(md_code(f) for f in model.files) or "none named"))
    lines.append("- findings in order: " + (", ".join(
        f"{fid} {md_code(f'{ids[fid].file}:{ids[fid].line}')} [{ids[fid].rule}]" if fid in ids else fid
        for fid in model.findings) or "none named"))
    lines += ["- to verify:", *[f"  - {md_inline(v, keep_code=True)}" for v in model.verify]] if model.verify else [
        "- to verify: nothing named"]
    if model.rationale:
        lines.append(f"- why: {md_inline(model.rationale, keep_code=True)}")
    lines += [f"- warning: {md_inline(w, keep_code=True)}" for w in model.warnings]
    return lines


def plan_section(state: State) -> list[str]:
    plan = plan_of(state)
    return ["(no plan: the migration stopped before it)"] if plan is None else _plan_lines(plan, scan_of(state))


def profile_change_lines(state: State) -> list[str]:
    """The model's profile round (under --llm): kept, rejected and reverted (and why), or not made."""
    rnd = profile_round_of(state)
    if rnd is None:
        return []
    head = {"kept": "kept: it passed the run, parity, the tests, the CPU check and the profile",
            "rejected": "rejected, and reverted to the last verified state",
            "not_made": "not made", "verifying": "not verified (the migration ended first)"}[rnd.phase]
    lines = ["", "### The model's profile change", "", f"- outcome: **{head}**"]
    if rnd.findings:
        lines.append("- findings shown: " + "; ".join(md_inline(f, keep_code=True) for f in rnd.findings))
    if rnd.files:
        lines.append("- files: " + ", ".join(md_code(f) for f in rnd.files))
    if rnd.summary:
        lines.append(f"- the model: {md_inline(rnd.summary, keep_code=True)}")
    if rnd.reason:
        lines.append(f"- why: {md_inline(rnd.reason, keep_code=True)}")
    return lines


def _rule_links(edit: Edit) -> list[str]:
    """Where each rule of a codemod or policy edit is described: its section of docs/idioms.md."""
    from tools.doclinks import idiom

    if edit.kind not in ("codemod", "policy"):
        return []
    rules = sorted(edit.rule_counts) or [edit.rule]
    return ["", "what each rule does and why: " + ", ".join(f"[{r}]({idiom(r)})" for r in rules)]


def _fence(text: str) -> str:
    return "`" * max(3, 1 + max((len(m) for m in re.findall(r"`+", text)), default=0))


# --- report.md ------------------------------------------------------------------------------------


def _environment_lines(opts: MigrationOptions) -> list[str]:
    """The user's own environment of the runs (--python, --cwd, --env), where one was given."""
    lines = []
    if opts.python:
        lines.append(f"- interpreter: {md_code(opts.python)}")
    if opts.cwd:
        lines.append(f"- working directory: {md_code(opts.cwd)}")
    if opts.env:
        lines.append("- environment: " + ", ".join(md_code(f"{k}={v}") for k, v in sorted(opts.env.items())))
    if opts.skip_rules:
        lines.append("- rules skipped by request: " + ", ".join(md_code(r) for r in opts.skip_rules))
    return lines


def report_markdown(state: State, patch: str) -> str:
    opts = options_of(state)
    status = status_of(state)
    lines = [f"# Ferry migration {md_inline(migration_id_of(state))}", "",
             f"- repository: {md_code(opts.source)}", f"- run: {md_code(opts.run_command)}",
             f"- tests: {md_code(opts.test_command or '(none)')}", *_environment_lines(opts),
             f"- **status: {status}**",
             f"- iterations: {iteration_of(state)}, runs: {len(runs_made_of(state))}, "
             f"wall time: {elapsed_of(state):.1f}s"]
    usage = llm_usage_of(state)
    if usage.model is not None:
        lines.append(llm_usage_line(usage))
    lines.append("")
    if summary_of(state):  # run-derived text (trace messages, stderr): escaped
        lines += [md_inline(str(summary_of(state)), keep_code=True), ""]
    lines += ["## Steps", "", "| step | what happened | seconds |", "|---|---|---|"]
    lines += [f"| {s.node} | {md_inline(s.summary, keep_code=True, table=True)} | {s.seconds:.2f} |"
              for s in steps_of(state)]
    lines += ["", "## Plan", "", *plan_section(state)]
    lines += ["", "## What changed and why", ""]
    edits = edits_of(state)
    if not edits:
        lines.append("No edits.")
    else:
        lines += ["| step | by | site | files |", "|---|---|---|---|"]
        lines += [f"| {e.step} | {md_inline(e.by, table=True)} | {md_code(e.site, table=True) if e.site else ''} "
                  f"| {', '.join(md_code(f, table=True) for f in e.files)} |" for e in edits]
        lines.append("")
    for e in edits:
        diff = e.diff.rstrip()
        fence = _fence(diff)
        lines += [f"### {e.step}: {e.rule} ({e.kind}, by {e.by})", "",  # Ferry's own step and rule ids
                  md_inline(e.reason, keep_code=True), *_rule_links(e), "", f"{fence}diff", diff, fence, ""]
    lines += ["## Parity", "", *parity_section(parity_of(state))]
    lines += ["", "## Device work (target run)", "", *device_work_section(state)]
    lines += ["", "## CPU check (migrated code on CPU vs the reference)", "", *cpu_check_section(state)]
    lines += ["", "## Test guard (tests before and after)", "", *guard_section(state)]
    lines += ["", "## Profile findings", "", *profile_section(profile_of(state), profile_error_of(state)),
              *profile_change_lines(state)]
    lines += ["", "## Left for a human", "", *left_for_human(state)]
    lines += ["", f"Patch: {len(patch.splitlines())} lines (ferry.patch)."]
    return "\n".join(lines) + "\n"
