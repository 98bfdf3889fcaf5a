"""report: decide the final status, write ferry.patch / report.md / result.json, apply if asked."""

from __future__ import annotations

import logging
import shutil
import subprocess
from pathlib import Path

from agent.errors import Status
from agent.migration.device_work import DEVICE_HINT, DEVICE_WAYS, work_problem
from agent.migration.nodes.common import SUMMARY, Update, counted, step
from agent.migration.nodes.reference import cancel_reference
from agent.migration.paths import TRAJECTORY_FILE, run_artifacts
from agent.migration.records import Outputs
from agent.migration.render import report_markdown, result_of
from agent.migration.runs import RunScheduler
from agent.migration.state import (
    MigrationState,
    State,
    cpu_check_of,
    device_work_error_of,
    device_work_of,
    dump,
    edits_of,
    files_of,
    migration_id_of,
    options_of,
    parity_of,
    plan_of,
    runs_of,
    scan_of,
    status_of,
    summary_of,
)
from tools.parity.models import ParityReport
from tools.patch import Patch, PatchRequest, build_patch, git_apply

logger = logging.getLogger(__name__)


NO_CUDA_HINT = ("the file this command runs ({entry}) holds no CUDA code and Ferry left it unchanged: it does not "
                "ask for a GPU there, so it runs on CPU as before; if it picks its device in a module it imports, "
                f"check how there ({DEVICE_WAYS})")


def untouched_entry(state: State) -> str | None:
    """The run's entry file when the scan found no CUDA in it and no edit changed it, else None."""
    plan = plan_of(state)
    entry = plan.entry_file if plan is not None else None
    if entry is None:
        return None
    scan = scan_of(state)
    if scan is not None and any(f.file == entry for f in scan.findings):
        return None
    if any(entry in e.files for e in edits_of(state)):
        return None
    return entry


def device_work_problem(state: State) -> str | None:
    """Why the passing target run does not show the program's work on tpx, None when it does."""
    entry = untouched_entry(state)
    hint = NO_CUDA_HINT.format(entry=entry) if entry else DEVICE_HINT
    return work_problem(device_work_of(state), device_work_error_of(state), hint)


def cpu_check_problem(state: State) -> str | None:
    """Why the CPU guard failed (or did not run), None when it passed."""
    check = cpu_check_of(state)
    if check is None:
        return "the CPU check did not run, so the migrated code is not shown to run on CPU as the original did"
    if check.verdict == "skipped":
        return f"the CPU check was not run ({check.reason})"
    return check.reason if check.verdict == "fail" else None


def final_status(state: State) -> tuple[Status, str]:
    """The status the graph decided, or, when it went all the way, what the evidence shows."""
    status, summary = status_of(state), summary_of(state) or ""
    if status is not None:
        return status, summary
    parity = parity_of(state)
    if parity is None:
        return "partial", "the graph ended without a parity verdict"
    # what was shown of the tests: without a test command none ran, and the summary must not say they passed
    given = bool(options_of(state).test_command)
    tests = tests_phrase(state) if given else "no test command was given (no tests ran)"
    if not parity.compared:
        return "partial", (f"runs on tpx and {'the tests pass' if given else tests}, but parity could not be shown: "
                           "the program ran no nn.Module, printed no metric, saved no tensor, left none at top "
                           "level and recorded nothing to compare")
    problems = [p for p in (device_work_problem(state), cpu_check_problem(state)) if p]
    if problems:
        return "partial", f"runs on tpx, {tests} and {parity_phrase(parity)}, but " + "; and ".join(problems)
    work, check = device_work_of(state), cpu_check_of(state)
    shown = f" ({work.describe()})" if work is not None else ""
    cpu = ("the original needs an accelerator (no CPU path to keep)" if check and check.verdict == "not_applicable"
           else "the migrated code still runs on CPU")
    return "migrated", f"runs on tpx{shown}, {tests}, {parity_phrase(parity)} and {cpu}"


def tests_phrase(state: State) -> str:
    """"tests pass" with how many ran and passed (the last tests run's pytest report), or that they were not
    counted."""
    run = next((r for r in reversed(runs_of(state)) if r.kind == "tests"), None)
    counted = run.tests_counted() if run is not None else None
    if counted is None:
        return "tests pass (not counted: the test command wrote no pytest report)"
    return f"tests pass ({counted})"


def parity_phrase(parity: ParityReport) -> str:
    """"parity passes", or, for a default run whose divergence a side run explained, what was measured."""
    trial = parity.explanation
    if trial is None:
        return "parity passes"
    return (f"parity passes as measured ({trial.describe()}: the migrated code computes what the original does; "
            f"the default run's drift is the {' and '.join(parity.explained_by)} setting's)")


def _write_outputs(out: Path, final: MigrationState, patch: Patch, applied: bool | None,
                   trajectory: Path) -> Outputs:
    out.mkdir(parents=True, exist_ok=True)
    (out / "ferry.patch").write_text(patch.diff, encoding="utf-8")
    (out / "report.md").write_text(report_markdown(final, patch.diff), encoding="utf-8")
    result = result_of(final, patch.files, applied)
    (out / "result.json").write_text(result.model_dump_json(indent=2), encoding="utf-8")
    kept: str | None = None
    if trajectory.is_file():  # recorded in the state dir's copy as the model was asked; --out gets a copy
        if trajectory.parent.resolve() != out.resolve():
            shutil.copyfile(trajectory, out / TRAJECTORY_FILE)
        kept = str(out / TRAJECTORY_FILE)
    return Outputs(dir=str(out), patch=str(out / "ferry.patch"), report=str(out / "report.md"),
                   result=str(out / "result.json"), trajectory=kept)


@step("report")
def report(state: MigrationState, runs: RunScheduler) -> Update:
    opts = options_of(state)
    stopped = cancel_reference(state, runs)  # the migration ended before its target run needed it
    runs.cancel_prefix(f"{migration_id_of(state)}:")  # speculative runs nobody will collect
    status, summary = final_status(state)
    if opts.skip_rules and "skipped by request" not in summary:
        summary = f"{summary} (rules skipped by request: {', '.join(opts.skip_rules)})"
    final: MigrationState = {**state, "status": status, "summary": summary}
    patch = build_patch(PatchRequest(original=Path(opts.source), files=dict(files_of(state))))
    applied = None
    if opts.apply and status == "migrated" and patch.diff:
        try:
            git_apply(Path(opts.source), patch.diff)
            applied = True
        except subprocess.CalledProcessError as exc:
            applied = False
            summary = f"{summary}; --apply failed: git apply: {exc.stderr.strip()}"
            final["summary"] = summary
    # The state dir's copy first: it is what `ferry resume` and the service read, and where the
    # user finds the outputs when their --out cannot be written.
    out_dirs = [run_artifacts(opts.state_dir, migration_id_of(state), "out")]
    if opts.out_dir:
        out_dirs.append(Path(opts.out_dir).expanduser())
    outputs: Outputs | None = None
    failed: list[str] = []
    trajectory = out_dirs[0] / TRAJECTORY_FILE
    for out in out_dirs:
        try:
            # the last one written: --out when it worked
            outputs = _write_outputs(out, final, patch, applied, trajectory)
        except OSError as exc:
            logger.warning("cannot write the outputs to %s: %s", out, exc)
            failed.append(f"{exc.filename or out}: {exc.strerror or exc}")
    if failed:
        where = (f"; a copy is in {outputs.dir}" if outputs else
                 "; nothing was written: free space or fix the permissions and run the migration again")
        summary = (f"the migration ended {status} ({summary}) but its outputs could not be written: "
                   f"{'; '.join(failed)}{where}")
        status = "failed_output"
    return {**stopped, "status": status, "summary": summary, "outputs": dump(outputs) if outputs else None,
            SUMMARY: f"{status}; {counted(len(patch.files), 'file')} in the patch" + ("; applied" if applied else "")}
