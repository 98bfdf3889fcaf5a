"""target_run: the migrated workspace on tpx (no CUDA redirect), probed and profiled. tests: the tests on tpx.

The tests run once parity passes, so a parity fix (which changes the code again) does not cost a
second test run; any later edit sends the graph back through target_run, parity and tests.

Side by side (``agent.migration.runs``): when a core is free, target_run also starts this iteration's tests
beside the target run; the tests node then only collects them. Tests started for code that has
since changed are cancelled. The reference run is joined by the next node, ``await_reference``.
"""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import cast

from agent.errors import FerryAgentError, ToolUnavailable
from agent.migration import adapters
from agent.migration.budget import ensure_time_for, has_time_for, run_timeout
from agent.migration.nodes import evidence, guard
from agent.migration.nodes.common import SUMMARY, Update, artifacts_dir, ensure_workspace, step
from agent.migration.nodes.cpu_check import cpu_check_key, cpu_check_label, run_cpu_check
from agent.migration.records import RunRecord
from agent.migration.runs import RunScheduler, finished
from agent.migration.state import (
    MigrationState,
    dump,
    files_of,
    iteration_of,
    migration_id_of,
    options_of,
    prepared_target_of,
)
from agent.migration.workspace import code_digest, round_label
from tools.runner.models import RunResult

logger = logging.getLogger(__name__)


def _tests_label(state: MigrationState) -> str:
    """Names the tests run of this iteration's code (every applied edit starts a new iteration; the label
    carries the code's digest too: ``agent.migration.workspace.round_label``)."""
    return round_label("tests", iteration_of(state), files_of(state))


def _tests_key(state: MigrationState) -> str:
    return f"{migration_id_of(state)}:{_tests_label(state)}"


def start_beside(state: MigrationState, runs: RunScheduler, ws: Path, foreground: bool = True,
                 tests: bool = True) -> list[str]:
    """Start the tests and the CPU check of ``state``'s round (its iteration and files; ``ws`` holds that code)
    in the background where cores are free and the budget allows, unless they are running or finished; what
    was started, in words. ``target_run`` starts them beside itself, and the matmul-precision cause trial
    beside its run of the next round's code (``agent.migration.nodes.causes``). ``foreground``: the caller is
    about to make a run of its own, which needs a core too (False: ``target_run`` taking a prepared run).
    ``tests``: False leaves the round's tests out (the caller awaits them: they must not start again)."""
    opts = options_of(state)
    tests_key, cpu_key = _tests_key(state), cpu_check_key(state)
    need = 2 if foreground else 1
    beside: list[str] = []
    if (tests and opts.test_command and not runs.has(tests_key) and runs.spare_cores() >= need
            and has_time_for(state, "tests")):
        adir = artifacts_dir(state, _tests_label(state))
        if finished(adir) is None:
            adir.mkdir(parents=True, exist_ok=True)
            if runs.start(tests_key, lambda cancel: _run_tests(state, ws, adir, cancel)):
                beside.append("tests")
    if not runs.has(cpu_key) and runs.spare_cores() >= need and has_time_for(state, "cpu_check"):
        cdir = artifacts_dir(state, cpu_check_label(state))
        if finished(cdir) is None:
            cdir.mkdir(parents=True, exist_ok=True)
            if runs.start(cpu_key, lambda cancel: run_cpu_check(state, ws, cdir, cancel)):
                beside.append("the CPU check")
    started = runs.has(guard.reference_tests_key(state)) or runs.has(guard.reference_collect_key(state))
    if not started and runs.spare_cores() >= need and guard.start_reference_tests(state, runs):
        beside.append("the tests on the original" if guard.full_run_needed(state)
                      else "the collection of the tests on the original")
    return beside


def drop_beside(state: MigrationState, runs: RunScheduler) -> list[str]:
    """Cancel ``state``'s round's tests and CPU check, started beside its target run: its parity failed, so the
    graph never collects them (a fix changes the code, or the report ends the migration ``partial``), and the
    cores they hold go to the cause trials and the next round's runs. The tests on the original, which every
    round shares, go on. Returns the keys cancelled."""
    return [key for key in (_tests_key(state), cpu_check_key(state)) if runs.cancel(key)]


@contextmanager
def beside_as_cores_free(state: MigrationState, runs: RunScheduler, ws: Path,
                         waiting_for: str | None = None) -> Iterator[list[str]]:
    """While the caller's foreground run of ``state``'s round goes on (``waiting_for``: while the caller waits for
    that background run instead, making none of its own): each background run that ends frees a core (the
    reference run, most often, which started with the migration), and what :func:`start_beside` could not start
    before (the round's tests, its CPU check, the tests on the original) takes it instead of waiting for the run's
    end and the nodes after it. Yields what was started so, in words (filled while the block runs); the watching
    thread has stopped when the block ends."""
    late: list[str] = []
    done = threading.Event()

    def over() -> bool:  # (the awaited run's end is not a core for more: its result decides what comes next)
        return done.is_set() or (waiting_for is not None and not runs.running(waiting_for))

    def offer() -> None:  # (never the awaited run itself: the caller joins it and makes it again if it failed)
        started = start_beside(state, runs, ws, foreground=waiting_for is None, tests=waiting_for is None)
        late.extend(what for what in started if what not in late)

    def watch() -> None:
        seen = runs.ended()  # counted first: a run that ends from here on is seen below
        try:
            if not over():
                offer()  # a core free already (the caller's own look came before this one)
            while True:
                now = runs.wait_for_an_end(seen, done)
                if now is None or over():
                    return
                seen = now
                offer()
        except Exception:  # the nodes after the run start what is missing, as before
            logger.warning("starting runs beside the target run as cores freed failed", exc_info=True)

    # the runs it starts take the caller's context (the migration's run environment), as runs.start does
    thread = threading.Thread(target=contextvars.copy_context().run, args=(watch,), name="ferry-beside", daemon=True)
    try:
        thread.start()
    except RuntimeError:  # no thread to be had: the nodes after the run start what is missing, as before
        logger.warning("no thread to start runs beside the target run as cores free", exc_info=True)
        yield late
        return
    try:
        yield late
    finally:
        done.set()
        runs.wake()
        thread.join()


def reusable(state: MigrationState) -> RunResult | None:
    """The prepared run (``prepared_target``) when it ran exactly this round's code and its probe dump (and
    profile, where it wrote one) are still there; None otherwise."""
    prepared = prepared_target_of(state)
    if prepared is None or prepared.files_digest != code_digest(files_of(state)):
        return None
    run = prepared.run
    if not run.ok or run.probe_dir is None or not run.probe_dir.is_dir():
        return None
    if run.profile_dir is not None and not run.profile_dir.is_dir():
        return None
    return run


def _run_tests(state: MigrationState, ws: Path, adir: Path, cancel: threading.Event | None) -> RunResult:
    opts = options_of(state)
    return adapters.run(ws, opts.test_command or "", device="tpx", redirect_cuda=None, probe=False, profile=False,
                       timeout_s=run_timeout(state), seed=opts.seed, artifacts_dir=adir, cancel=cancel,
                       disk_limit_bytes=opts.disk_limit_bytes, coverage=guard.coverage_wanted(state))


@step("target_run")
def target_run(state: MigrationState, runs: RunScheduler) -> Update:
    opts = options_of(state)
    runs.prewarm_runs(opts.seed)  # started by ingest unless this process resumed the migration
    ws = ensure_workspace(state)
    it = iteration_of(state)
    tests_key = _tests_key(state)
    cpu_key = cpu_check_key(state)
    runs.cancel_prefix(f"{migration_id_of(state)}:tests-", keep=tests_key)  # tests of older code
    runs.cancel_prefix(f"{migration_id_of(state)}:cpu-check-", keep=cpu_key)
    prepared = reusable(state)
    if prepared is None:
        ensure_time_for(state, "target", f"the target run of iteration {it}")
    earlier: Update = {}
    if prepared is None and evidence.wanted(state):  # the first round as evidence: the plain code ended after its
        # steps, FIX008's run beside it (nothing, where the policy would not write FIX008)
        # the evidence run is a background run itself, counted among those in flight: no foreground run to add
        earlier = evidence.speculate(state, runs, ws,
                                     lambda nxt, fix_ws: start_beside(nxt, runs, fix_ws, foreground=False))
        if evidence.pending(cast(MigrationState, {**state, **earlier})) is not None:
            return {**earlier, "workspace": str(ws)}
    spec = evidence.declined(cast(MigrationState, {**state, **earlier}))
    beside = start_beside(state, runs, ws, foreground=prepared is None)
    runs.prewarm_imports()  # parity and the profile report need torch in this process next
    late: list[str] = []
    if prepared is not None:  # the cause trial ran this very code: no second run of it
        run = prepared
        note = "the matmul-precision cause trial's run of this code (FIX008 written in) serves as the target run: ok"
        update: Update = {"runs": [dump(RunRecord.of("target", run, reused=True))]}
    else:
        with beside_as_cores_free(state, runs, ws) as late:  # (filled as the run goes on)
            run = adapters.run(
                ws, opts.run_command, device="tpx", redirect_cuda=None, probe=True, profile=True,
                timeout_s=run_timeout(state), seed=opts.seed, artifacts_dir=artifacts_dir(state, f"target-{it}"),
                disk_limit_bytes=opts.disk_limit_bytes,
            )
        note = f"{spec.reason}; full run ok" if spec is not None else ""
        update = {"runs": [*earlier.get("runs", []), dump(RunRecord.of("target", run))]}
        if spec is not None:
            update.update(evidence.settle(spec))
    update.update({"workspace": str(ws), "last_run": dump(run), "last_phase": "run", "prepared_target": None})
    if not run.ok:
        update[SUMMARY] = f"run failed ({run.status})"
        runs.cancel(tests_key)  # these tests will never be collected
        runs.cancel(cpu_key)  # nor this CPU check
        return update
    update.update(_device_work(run))
    started = started_clause(beside, late)
    said = f"{note} in {run.duration_s:.1f}s" if note else f"run ok in {run.duration_s:.1f}s"
    update.update({"target_ok": dump(run), SUMMARY: said + started})
    return update


def started_clause(beside: list[str], late: list[str]) -> str:
    """What started beside the target run, for its summary: `` (A started beside it; B as a core freed)``,
    `` (B started beside it as a core freed)`` when only a freed core started anything, ``""`` when nothing did."""
    parts = [f"{' and '.join(beside)} started beside it"] if beside else []
    if late:
        parts.append(f"{' and '.join(late)}{'' if beside else ' started beside it'} as a core freed")
    return f" ({'; '.join(parts)})" if parts else ""


def _device_work(run: RunResult) -> Update:
    """The passing target run's evidence of device work (its profile's op counts), or why there is none."""
    if run.profile_dir is None:
        return {"device_work": None, "device_work_error": "the target run left no profile"}
    try:
        work = adapters.device_work(run.profile_dir)
    except ToolUnavailable:
        raise
    except FerryAgentError as exc:
        return {"device_work": None, "device_work_error": str(exc)}
    return {"device_work": dump(work), "device_work_error": None}


@step("tests")
def tests(state: MigrationState, runs: RunScheduler) -> Update:
    opts = options_of(state)
    if not opts.test_command:
        return {SUMMARY: "no test command"}
    ws = ensure_workspace(state)
    adir = artifacts_dir(state, _tests_label(state))
    # the tests on the original beside the tests' rest (or their run now), not after them, where a core is free:
    # the tests' own run, if it is made now, takes one (and the runs in flight stay what sandbox.hostmem counts).
    # Tests started beside the target run may hold the last core with another background run (the CPU check):
    # the first of them to end frees one, and the original's tests take it while the tests still run.
    tests_key = _tests_key(state)
    if runs.spare_cores() < 1 and guard.reference_tests_to_start(state, runs):
        runs.wait_for_core(tests_key)
    need = 1 if runs.has(tests_key) else 2
    if runs.spare_cores() >= need:
        guard.start_reference_tests(state, runs)
    with beside_as_cores_free(state, runs, ws, waiting_for=tests_key) as late:  # the CPU check, where it waits
        run = runs.join(tests_key, adir)
    where = " (beside the target run)" if run is not None else ""
    if late and run is not None:
        where += f"; {' and '.join(late)} started beside them as a core freed"
    if run is None:
        ensure_time_for(state, "tests", "the tests run")
        run = _run_tests(state, ws, adir, None)
    after = guard.snapshot(run, adir, guard.coverage_wanted(state))
    # the test guard's reference: the same command on the original, in full only where it can change the verdict
    before = guard.reference_tests(state, runs, after if run.ok else None)
    update: Update = {**before, "last_run": dump(run), "last_phase": "test", "tests_after": dump(after),
                      "runs": [*before.get("runs", []), dump(RunRecord.of("tests", run))]}
    update[SUMMARY] = (f"tests pass in {run.duration_s:.1f}s{where}" if run.ok
                       else f"tests failed ({run.status}){where}")
    if not run.ok:  # a failing test is the fix loop's (diagnose); the guard judges a passing run
        return update
    lost = guard.dynamic_check(cast(MigrationState, {**state, **before}), after)
    if not lost:
        return update
    what = f"the tests run of iteration {iteration_of(state)}"
    if options_of(state).approve and guard.ask(lost, what):
        update["guard"] = [guard.event(f, "accepted", _tests_label(state)) for f in lost]
        update[SUMMARY] += f"; {len(lost)} test(s) lost against the reference, accepted by approval"
        return update
    return {**update, **guard.refused(lost, _tests_label(state), what)}
