"""cpu_check: the CPU guard. The migrated code must still run on CPU, as the original did, with the
reference run's results, before a migration is ``migrated``.

The run: the migrated workspace with device ``cpu`` and no CUDA redirect, so no accelerator is
available to it (the runner turns off the backend autoload: tpx is not registered and
``torch.accelerator`` has nothing to offer), probe on. Its probe dump is compared with the reference
run's (the original on CPU under the CUDA redirect) at the CPU tier: every compared tensor must
pass within ``torch.testing.assert_close``'s tolerances for its dtype (same device, same seed);
a tensor that passes only by the looser cosine or tiered checks of a reduced-precision target
fails the guard. When the run fails or differs, the original runs on CPU the same way (no
redirect, one more run, only then): if it fails too, the program needs an accelerator and has no
CPU path to keep (``not_applicable``: a `check_gpu()` that exits without CUDA); if it runs, the
migrated run must match it (the reference may have taken the CUDA branch of a device switch under
the redirect). The node records a :class:`agent.migration.records.CpuCheck`; the report node turns a
failed guard into ``partial`` with its reason.

Side by side (``agent.migration.runs``): ``target_run`` starts this run beside itself when a core is free;
this node then only collects it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from agent.errors import BudgetExhausted, FerryAgentError, ToolUnavailable
from agent.migration import adapters, run_cache
from agent.migration.budget import Clock, ensure_time_for, expected_run_s
from agent.migration.device_work import work_problem
from agent.migration.nodes.common import (
    SUMMARY,
    Update,
    artifacts_dir,
    diagnosis_from_run,
    dtype_changes_of,
    ensure_workspace,
    fix_context,
    source_of,
    step,
)
from agent.migration.records import CpuCheck, Edit, RunRecord
from agent.migration.runs import RunScheduler, finished
from agent.migration.state import (
    MigrationState,
    device_work_error_of,
    device_work_of,
    dump,
    edits_of,
    files_of,
    iteration_of,
    llm_before_of,
    migration_id_of,
    options_of,
    parity_of,
    profile_round_of,
    reference_of,
    runs_of,
)
from agent.migration.workspace import round_label
from agent.policy.base import Diagnosis, diagnosis_of
from tools.patch import file_diff
from tools.runner.models import RunResult

logger = logging.getLogger(__name__)

CPU_TIER = "assert_close"  # the tier a same-device comparison must pass at (tools/parity/metrics.py)
#: ``why`` quotes the original's own run, before any edit: the migrated files no longer read as it says
NO_CPU_PATH = ("the original does not run on CPU either (before Ferry's changes it ended {why}): it needs an "
               "accelerator, so there is no CPU path to keep")


def cpu_check_label(state: MigrationState) -> str:
    """Names the CPU check of this iteration's code (every applied edit starts a new iteration; the label
    carries the code's digest too: ``agent.migration.workspace.round_label``)."""
    return round_label("cpu-check", iteration_of(state), files_of(state))


def cpu_check_key(state: MigrationState) -> str:
    return f"{migration_id_of(state)}:{cpu_check_label(state)}"


def _run_on_cpu(state: MigrationState, path: Path, adir: Path, cancel: threading.Event | None,
                clock: Clock | None = None, what: str = "the CPU check") -> RunResult:
    """``path``'s code on CPU, probed; a run stopped by the wall-time budget raises ``BudgetExhausted``
    (it shows nothing about the CPU path)."""
    opts = options_of(state)
    clock = clock or Clock.of(state)
    timeout = clock.timeout()
    run = adapters.run(path, opts.run_command, device="cpu", redirect_cuda=None, probe=True, profile=False,
                      timeout_s=timeout, seed=opts.seed, artifacts_dir=adir, cancel=cancel,
                      disk_limit_bytes=opts.disk_limit_bytes)
    if run.status == "timeout" and clock.capped(timeout):
        raise clock.stopped(what, run.duration_s)
    return run


ORIGINAL_LABEL = "cpu-original"


def run_cpu_check(state: MigrationState, ws: Path, adir: Path, cancel: threading.Event | None) -> RunResult:
    """The migrated workspace on CPU: device ``cpu``, no CUDA redirect, probe on. Made in the background (beside
    a target run), a run that fails is followed there by the original's run on CPU, which the node then makes
    in any case (:func:`judge`): it finds it finished instead of making it after the tests."""
    run = _run_on_cpu(state, ws, adir, cancel)
    if cancel is not None and not run.ok and run.status != "cancelled" and not cancel.is_set():
        _original_beside(state, cancel)
    return run


def _original_beside(state: MigrationState, cancel: threading.Event) -> None:
    """The original's run on CPU right after a failed CPU check, unless an earlier migration kept one, it
    finished already, or the budget has no room for it (then the node decides, as before)."""
    opts = options_of(state)
    odir = artifacts_dir(state, ORIGINAL_LABEL)
    if finished(odir) is not None or run_cache.kept(opts, "cpu_original", odir) is not None:
        return
    clock = Clock.of(state)
    left, expected = clock.left(), expected_run_s(state, "cpu_original")
    if left is not None and expected is not None and expected[0] > left:
        return
    try:
        _run_on_cpu(state, source_of(state), odir, cancel, clock, "the original's run on CPU")
    except BudgetExhausted as exc:  # the node runs it (or says why not) when it needs it
        logger.info("the original's run on CPU beside the CPU check stopped: %s", exc)


def why_failed(run: RunResult) -> str:
    """How a run failed, with the program's last words when no traceback was parsed (a SystemExit)."""
    line = run.failure_line()
    if run.trace is None and not run.error:
        last = next((t.strip() for t in reversed(run.stderr_tail.splitlines()) if t.strip()), "")
        line = f"{line}: {last}" if last else line
    return line[:400]


def _mismatch(ref_dir: Path | None, cpu_dir: Path | None, runs: RunScheduler,
              dtype_changes: dict[str, str]) -> tuple[str | None, int, str | None]:
    """Compares two probe dumps of CPU runs at the CPU tier: (what differs or None, tensors compared,
    the first divergence). A dtype the migration changed (float64 -> float32, recorded by its edits)
    is compared at the assert_close tolerances of the dtype the migrated code computes in: the CPU
    path keeps its results up to that change, which the report names."""
    if ref_dir is None or cpu_dir is None or not ref_dir.is_dir() or not cpu_dir.is_dir():
        return (f"its results could not be compared (probe dumps: {ref_dir or 'none'} and {cpu_dir or 'none'})",
                0, None)
    runs.wait_prewarm()
    try:
        report = adapters.compare(ref_dir, cpu_dir, dtype_changes)
    except ToolUnavailable:
        raise
    except FerryAgentError as exc:
        return str(exc), 0, None
    rows = [t for t in report.rows() if t.verdict != "skipped"]
    loose = [t for t in rows if t.verdict != "pass" or t.tier != CPU_TIER]
    if not (report.failed or loose):
        return None, len(rows), None
    first = report.divergence_text() if report.failed else f"{loose[0].key} ({loose[0].tier}: {loose[0].reason})"
    return (f"{len(loose)} of {len(rows)} compared tensors differ beyond assert_close (first: {first})",
            len(rows), first)


def _check(run: RunResult, verdict: Literal["pass", "fail", "not_applicable"], reason: str, compared: int = 0,
           first: str | None = None, against: Literal["reference", "original_on_cpu"] | None = None) -> CpuCheck:
    return CpuCheck(verdict=verdict, passed=None if verdict == "not_applicable" else verdict == "pass",
                    reason=reason, run_status=run.status, duration_s=run.duration_s, compared=compared,
                    first_divergence=first, against=against)


def judge(state: MigrationState, run: RunResult, runs: RunScheduler,
          original_on_cpu: Callable[[], RunResult]) -> CpuCheck:
    """The guard's verdict on ``run`` (the migrated code on CPU). It is first compared with the
    reference run; when it fails or differs, the original's own run on CPU (``original_on_cpu()``,
    no redirect) decides: the original fails too (no CPU path to keep: not applicable), or the
    migrated run must match it."""
    ref = reference_of(state)
    changes = dtype_changes_of(state)
    tier = ("; " + ", ".join(f"{a} -> {b}" for a, b in sorted(changes.items()))
            + " by the migration: compared at the new dtype's tolerances") if changes else ""
    if run.ok:
        problem, n, first = _mismatch(ref.probe_dir if ref is not None else None, run.probe_dir, runs, changes)
        if problem is None:
            what = f"{n} compared tensors match the reference run{tier}" if n else "nothing to compare"
            return _check(run, "pass", f"runs on CPU; {what}", n, against="reference")
    orig = original_on_cpu()
    if not orig.ok:
        return _check(run, "not_applicable", NO_CPU_PATH.format(why=why_failed(orig)))
    if not run.ok:
        return _check(run, "fail", f"the migrated code no longer runs on CPU (the original does): {why_failed(run)}")
    problem, n, first = _mismatch(orig.probe_dir, run.probe_dir, runs, changes)
    if problem is None:
        return _check(run, "pass", f"runs on CPU; {n} compared tensors match the original's own run on CPU "
                      f"(the reference took the CUDA path under the redirect){tier}", n, against="original_on_cpu")
    return _check(run, "fail", f"the migrated code runs on CPU but changes its numbers: {problem}", n, first,
                  against="original_on_cpu")


def moot(state: MigrationState) -> str | None:
    """Why the CPU check cannot change this migration's verdict, or None when it can (then it runs).

    The check decides between ``migrated`` and ``partial`` only (``report.final_status``); the report
    reaches its problems only when parity compared something. Parity that compared nothing (the program
    ran no nn.Module, printed no metric, saved no tensor) ends ``partial`` whatever the check shows, and
    the check itself then compares nothing with the reference either. It still runs where it is evidence
    of something else: a run whose work did not reach tpx (a control program: the check shows the patch
    kept its CPU path), the model's edit (the guard may reject and revert it) and the model's profile
    change under verification."""
    parity = parity_of(state)
    if parity is None or parity.compared:
        return None
    edits = edits_of(state)
    if options_of(state).llm and ((edits and edits[-1].kind == "llm") or profile_round_of(state) is not None):
        return None
    if work_problem(device_work_of(state), device_work_error_of(state), "") is not None:
        return None
    return ("parity compared no tensor, so the migration is partial whatever the CPU check shows, and the check "
            "would compare nothing with the reference either")


@step("cpu_check")
def cpu_check(state: MigrationState, runs: RunScheduler) -> Update:
    why_not = moot(state)
    if why_not is not None:
        runs.cancel(cpu_check_key(state))  # started beside the target run: nobody will collect it
        check = CpuCheck(verdict="skipped", passed=None, reason=why_not, run_status="not run")
        return {"cpu_check": dump(check), SUMMARY: f"skipped: {why_not}"}
    ws = ensure_workspace(state)
    adir = artifacts_dir(state, cpu_check_label(state))
    run = runs.join(cpu_check_key(state), adir)
    where = " (beside the target run)" if run is not None else ""
    clock = Clock.of(state)
    if run is None:
        ensure_time_for(state, "cpu_check", "the CPU check")
        run = _run_on_cpu(state, ws, adir, None, clock)
    records = [dump(RunRecord.of("cpu_check", run))]

    def original_on_cpu() -> RunResult:
        odir = artifacts_dir(state, ORIGINAL_LABEL)
        opts = options_of(state)
        done = finished(odir)  # made beside, right after the CPU check failed there (run_cpu_check)
        if done is not None and run_cache.reused_from(odir) is None:
            run_cache.keep(opts, "cpu_original", done, migration_id_of(state))
            again = any(r.kind == "cpu_original" for r in runs_of(state))  # an earlier round's
            records.append(dump(RunRecord.of("cpu_original", done, reused=again)))
            return done
        left = clock.left()
        expected = expected_run_s(state, "cpu_original")
        if left is not None and expected is not None and expected[0] > left:
            raise BudgetExhausted(f"wall-time budget: {max(left, 0.0):.0f}s of --max-wall left and {expected[1]} "
                                  f"took {expected[0]:.0f}s, so the original's run on CPU (which decides the CPU "
                                  "check) was not started; run the migration again with a larger --max-wall")
        orig = run_cache.kept(opts, "cpu_original", odir)  # an earlier migration's run of this same original
        if orig is None:
            orig = _run_on_cpu(state, source_of(state), odir, None, clock, "the original's run on CPU")
            run_cache.keep(opts, "cpu_original", orig, migration_id_of(state))
        records.append(dump(RunRecord.of("cpu_original", orig, reused=run_cache.reused_from(odir) is not None)))
        return orig

    check = judge(state, run, runs, original_on_cpu)
    update: Update = {"runs": records, SUMMARY: f"{check.verdict}: {check.reason} in {run.duration_s:.1f}s{where}"}
    rejected = reject_model_edit(state, check, run)
    if rejected is not None:
        check = check.model_copy(update={"rejected_edit": rejected.pop("_rejected")})
        update.update(rejected)
        update[SUMMARY] = f"{update[SUMMARY]}; the model's edit {check.rejected_edit} is rejected and reverted"
    update["cpu_check"] = dump(check)
    return update


def reject_model_edit(state: MigrationState, check: CpuCheck, run: RunResult) -> Update | None:
    """When the guard failed on the model's last edit (under --llm, iterations left): the update that
    reverts it and asks the model again (``_rejected``: the edit's step), else None."""
    opts = options_of(state)
    edits = edits_of(state)
    before = llm_before_of(state)
    if check.verdict != "fail" or not opts.llm or not edits or edits[-1].kind != "llm" or not before:
        return None
    if iteration_of(state) >= opts.max_iterations:
        logger.info("the CPU guard failed on the model's edit, but no fix round is left: not asking again")
        return None
    last = edits[-1]
    current = files_of(state)
    files = {rel: text for rel, text in before.items() if rel in last.files}
    diff = "".join(file_diff(rel, current.get(rel), text) for rel, text in sorted(files.items()))
    ws = ensure_workspace({**state, "files": {**current, **files}})
    known = fix_context(state, ws).known_files
    found = diagnosis_from_run(run, "run", known) if not run.ok else None
    previous = diagnosis_of(state)
    if previous is not None and previous.phase == "cpu_check":
        previous = previous.previous  # rejected again: the failure to fix is still the first one
    finding = check.reason + (f" (CPU run: {why_failed(run)})" if not run.ok else "")
    diag = Diagnosis(phase="cpu_check", kind="cpu_guard_rejected", message=finding,
                     frames=found.frames if found is not None else [], exc_type=found.exc_type if found else "",
                     rejected_diff=last.diff, previous=previous)
    revert = Edit(step=f"revert-{last.step}", kind="llm", rule="cpu_guard_revert", site=last.site,
                  files=sorted(files), diff=diff,
                  reason=f"the CPU guard rejected the model's edit {last.step}: {check.reason}")
    return {"files": files, "workspace": str(ws), "edits": [dump(revert)],
            "diagnosis": diag.model_dump(mode="json"),
            "proposal": None, "_rejected": last.step}
