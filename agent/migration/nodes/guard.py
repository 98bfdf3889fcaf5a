"""The test guard in the graph (docs/guard.md): every edit ``apply_fix`` applies (a rule's, the model's, a
person's, the model's profile change) is read by ``tools.guard.static`` before it is made, and every tests
run of the migrated code is compared with the test command's run on the original (``tools.guard.outcomes``).

A finding ends the migration ``guard_refused`` with its rule and site, unless the user approves it under
``--approve`` (the approval request carries the findings; an approval is recorded as ``accepted``). The
policy's FIX008 in a test module is recorded as the documented exception.

The test command runs on the original in full only where its outcomes can change what the guard finds: when
every test of the migrated code passed (none failed, errored or skipped), no coverage is measured and the
command runs pytest, a test can only be lost by no longer being collected, so the original's tests are only
collected (``--collect-only``) and compared by node id; the full run follows only when one is missing.
"""

from __future__ import annotations

import logging
import shlex
import threading
from pathlib import Path
from typing import Any

from langgraph.types import interrupt

from agent.migration import adapters
from agent.migration.budget import has_time_for, run_timeout
from agent.migration.nodes.common import SUMMARY, Update, artifacts_dir, source_of
from agent.migration.records import GuardDecision, GuardEvent, RunRecord, RunRole, tests_of
from agent.migration.runs import RunScheduler, finished
from agent.migration.state import (
    MigrationState,
    dump,
    files_of,
    guard_events_of,
    migration_id_of,
    options_of,
    reference_collected_of,
    reference_tests_of,
)
from agent.migration.workspace import current_text
from tools.guard.models import (
    RULES,
    CollectedTests,
    FileEdit,
    GuardFinding,
    GuardNote,
    GuardRequest,
    GuardResult,
    TestsSnapshot,
)
from tools.guard.outcomes import coverage_drop, lost_tests, not_collected, read_collected, read_coverage
from tools.guard.static import check_patch
from tools.runner.models import RunResult

logger = logging.getLogger(__name__)

REFERENCE_TESTS = "reference-tests"
REFERENCE_COLLECT = "reference-collect"


def static_check(state: MigrationState, files: dict[str, str]) -> GuardResult:
    """The guard's reading of an edit: ``files`` (path -> new text) against what the workspace holds now."""
    source = source_of(state)
    prev = files_of(state)
    edits = [FileEdit(path=rel, before=current_text(source, prev, rel), after=text)
             for rel, text in sorted(files.items())]
    before = reference_tests_of(state)
    # None where the original's tests were not run (only collected, or not yet): GRD001 then counts every
    # removed test, the strict reading; the list only lets through the removal of a test that did not pass
    passed = [n for n, o in before.outcomes.items() if o == "passed"] if before is not None else None
    return check_patch(GuardRequest(files=edits, passed_on_reference=passed))


def event(finding: GuardFinding | GuardNote, decision: GuardDecision, step: str) -> dict[str, Any]:
    """A decision of the guard as the state stores it (a note is always the documented exception)."""
    if isinstance(finding, GuardNote):
        site = f"{finding.file}:{finding.line}" if finding.line is not None else finding.file
        return dump(GuardEvent(decision="exception", rule=finding.rule, site=site,
                               detail=finding.detail, step=step))
    return dump(GuardEvent(decision=decision, rule=finding.rule, name=RULES[finding.rule][0], site=finding.site,
                           test=finding.test, detail=finding.detail, step=step))


def refused(findings: list[GuardFinding], step: str, what: str) -> Update:
    """The update that ends the migration ``guard_refused``, naming each rule and site."""
    listed = "; ".join(f.describe() for f in findings)
    msg = (f"the test guard refused {what}: {listed}. An edit may not make the tests easier to pass "
           "(docs/guard.md); run with --approve to accept it explicitly")
    return {"status": "guard_refused", "summary": msg, "guard": [event(f, "refused", step) for f in findings],
            SUMMARY: f"guard_refused: {', '.join(f.key for f in findings)}"}


def ask(findings: list[GuardFinding], what: str, diff: str = "") -> bool:
    """Under --approve: pause the graph and ask whether the guard's findings are accepted (True: approved)."""
    first = findings[0]
    answer = interrupt({
        "type": "approve_guard", "rule": first.rule, "kind": "guard", "site": first.site,
        "reason": f"the test guard refuses {what} unless approved: " + "; ".join(f.describe() for f in findings),
        "diff": diff, "guard": [f.model_dump(mode="json") for f in findings],
        "how": "resume with {'action': 'approve'} to accept these findings | {'action': 'reject'}",
    })
    if isinstance(answer, str):
        answer = {"action": answer}
    return dict(answer or {}).get("action") == "approve"


_COVERAGE_CONFIG = ((".coveragerc", ""), ("pyproject.toml", "[tool.coverage"), ("setup.cfg", "[coverage:"),
                    ("tox.ini", "[coverage:"))


def coverage_wanted(state: MigrationState) -> bool:
    """Whether the tests runs measure line coverage: ``--coverage``, or the repository configures coverage
    (a .coveragerc, ``[tool.coverage.*]`` in pyproject.toml, ``[coverage:*]`` in setup.cfg or tox.ini)."""
    if options_of(state).coverage:
        return True
    source = source_of(state)
    for name, section in _COVERAGE_CONFIG:
        text = current_text(source, {}, name)
        if text is not None and section in text:
            return True
    return False


def snapshot(run: RunResult, adir: Path, coverage: bool) -> TestsSnapshot:
    """The tests a run collected and how each ended, with its line coverage where it was asked to measure it."""
    snap = TestsSnapshot.of(tests_of(run), run.status)
    if coverage:
        snap.coverage, snap.coverage_error = read_coverage(adir)
    return snap


def reference_tests_key(state: MigrationState) -> str:
    return f"{migration_id_of(state)}:{REFERENCE_TESTS}"


def reference_collect_key(state: MigrationState) -> str:
    return f"{migration_id_of(state)}:{REFERENCE_COLLECT}"


def runs_pytest(command: str) -> bool:
    """Whether a test command runs pytest (``pytest ...``, ``python -m pytest ...``, ``py.test``): only such a
    command can merely collect its tests."""
    try:
        words = shlex.split(command)
    except ValueError:
        return False
    for i, word in enumerate(words):
        if word.rsplit("/", 1)[-1] in ("pytest", "py.test"):
            return True
        if word == "-m" and i + 1 < len(words) and words[i + 1] in ("pytest", "py.test"):
            return True
    return False


def full_run_needed(state: MigrationState) -> bool:
    """Whether the tests on the original must run in full whatever the migrated code's tests do: coverage is
    measured (GRD008 compares the two runs' figures), or the command does not run pytest (it cannot only
    collect its tests)."""
    return coverage_wanted(state) or not runs_pytest(options_of(state).test_command or "")


def all_passed(after: TestsSnapshot) -> bool:
    """Every test of the run passed: none failed, errored or was skipped."""
    return all(o == "passed" for o in after.outcomes.values())


def _reference_tests_run(state: MigrationState, adir: Path, cancel: threading.Event | None,
                         collect_only: bool = False) -> RunResult:
    opts = options_of(state)
    return adapters.run(source_of(state), opts.test_command or "", device="cpu", redirect_cuda="cpu", probe=False,
                        profile=False, timeout_s=run_timeout(state), seed=opts.seed, artifacts_dir=adir,
                        disk_limit_bytes=opts.disk_limit_bytes, environment=adapters.RunEnvironment.of(opts),
                        coverage=not collect_only and coverage_wanted(state), cancel=cancel,
                        collect_only=collect_only)


def _reference_run_wanted(state: MigrationState) -> tuple[str, bool] | None:
    """The run of the tests on the original the state still lacks, as (its key, whether it only collects), or None:
    the state has the tests on the original, or no test command, or (where only collecting them can do,
    :func:`full_run_needed`) their collection."""
    if reference_tests_of(state) is not None or not options_of(state).test_command:
        return None
    if full_run_needed(state):
        return reference_tests_key(state), False
    return None if reference_collected_of(state) is not None else (reference_collect_key(state), True)


def reference_tests_to_start(state: MigrationState, runs: RunScheduler) -> bool:
    """Whether :func:`start_reference_tests` has a run to start: one the state lacks and none in flight."""
    wanted = _reference_run_wanted(state)
    return wanted is not None and not runs.has(wanted[0])


def start_reference_tests(state: MigrationState, runs: RunScheduler) -> bool:
    """Start the tests on the original in the background (they need only the original code), unless the state
    has them, they are running or finished, or the budget has no room; True when they are (now) in flight.
    What starts is the full run where it is needed whatever the migrated code's tests do
    (:func:`full_run_needed`), else the collect-only run, which is all a passing tests run needs.
    The tests node starts them before it waits for the migrated code's tests, and ``target.start_beside`` on a
    core left free, so that they run beside other work instead of after it."""
    wanted = _reference_run_wanted(state)
    if wanted is None:
        return False
    key, collect_only = wanted
    return _start_run(state, runs, key, collect_only=collect_only)


def _start_run(state: MigrationState, runs: RunScheduler, key: str, *, collect_only: bool) -> bool:
    """Start the tests on the original in full or only collected, under ``key``; True when it runs."""
    if runs.has(key):
        return True
    adir = artifacts_dir(state, REFERENCE_COLLECT if collect_only else REFERENCE_TESTS)
    role: RunRole = "reference_collect" if collect_only else "reference_tests"
    if finished(adir) is not None or not has_time_for(state, role):
        return False
    adir.mkdir(parents=True, exist_ok=True)
    return runs.start(key, lambda cancel: _reference_tests_run(state, adir, cancel, collect_only=collect_only))


def _run_reference_tests(state: MigrationState, runs: RunScheduler | None) -> RunResult | None:
    """The reference tests' run (joined from the background, or a finished one taken from its artefacts, or
    run now); None when the wall-time budget has no room for it (the guard then has no reference to hold the
    tests to, and says so)."""
    adir = artifacts_dir(state, REFERENCE_TESTS)
    done = runs.join(reference_tests_key(state), adir) if runs is not None else finished(adir)
    if done is not None:
        return done
    if not has_time_for(state, "reference_tests"):
        return None
    return _reference_tests_run(state, adir, None)


def _collect_reference(state: MigrationState, runs: RunScheduler | None) -> tuple[CollectedTests | None, Update]:
    """The tests the original collects (joined from the background, taken from the state or the artefacts, or
    collected now), with the update that records the run; None when they are not known (no time, the run
    failed or wrote no list: the command does not run pytest after all)."""
    known = reference_collected_of(state)
    if known is not None:
        return known, {}
    adir = artifacts_dir(state, REFERENCE_COLLECT)
    run = runs.join(reference_collect_key(state), adir) if runs is not None else finished(adir)
    if run is None:
        if not has_time_for(state, "reference_collect"):
            return None, {}
        run = _reference_tests_run(state, adir, None, collect_only=True)
    update: Update = {"runs": [dump(RunRecord.of("reference_collect", run))]}
    ids = read_collected(adir) if run.ok else None
    if ids is None:
        logger.info("the test command collected no tests on the original (%s): they run in full", run.status)
        return None, update
    collected = CollectedTests(tests=ids, run_status=run.status)
    return collected, {**update, "reference_collected": dump(collected)}


def reference_tests(state: MigrationState, runs: RunScheduler | None = None,
                    after: TestsSnapshot | None = None) -> Update:
    """The test command on the original code (CUDA redirected to CPU, as the reference run), once: the tests it
    collects and how each ends are what the migrated code's tests are held to. ``runs``: the scheduler that
    may have it in flight (:func:`start_reference_tests`). ``after``: the migrated code's tests, where their
    run passed; when every one of them passed (and :func:`full_run_needed` does not hold), the original's
    tests are only collected, and run in full only when one of them is not collected after."""
    if reference_tests_of(state) is not None or not options_of(state).test_command:
        return {}
    update: Update = {}
    if after is not None and all_passed(after) and not full_run_needed(state):
        collected, update = _collect_reference(state, runs)
        if collected is not None:
            missing = not_collected(collected.tests, after)
            if not missing:
                return update
            logger.info("%d test(s) the original collects are not collected after the migration (%s): the tests "
                        "on the original run in full", len(missing), ", ".join(missing[:5]))
    elif runs is not None and runs.has(reference_collect_key(state)):
        runs.cancel(reference_collect_key(state))  # a full run is needed: the collect-only one is not
    run = _run_reference_tests(state, runs)
    if run is None:
        logger.info("no time left in --max-wall for the tests on the original: the test guard has no reference")
        return update
    snap = snapshot(run, artifacts_dir(state, REFERENCE_TESTS), coverage_wanted(state))
    return {**update, "reference_tests": dump(snap),
            "runs": [*update.get("runs", []), dump(RunRecord.of("reference_tests", run))]}


def _accepted_for(lost: GuardFinding, accepted: list[GuardEvent]) -> bool:
    """Whether an approved static finding explains a lost test: a collection change, or a finding on that test."""
    name = (lost.test or "").split("[", 1)[0]
    for acc in accepted:
        if acc.rule == "GRD006":
            return True
        if acc.test is not None and acc.test.rsplit(".", 1)[-1] == name:
            return True
        if acc.rule in ("GRD007",) and acc.site == lost.site and acc.test == lost.test:
            return True
    return False


def dynamic_check(state: MigrationState, after: TestsSnapshot) -> list[GuardFinding]:
    """The tests that passed on the reference and do not pass after, less those an approval accepted."""
    before = reference_tests_of(state)
    if before is None:
        return []
    accepted = [e for e in guard_events_of(state) if e.decision == "accepted"]
    found = [f for f in lost_tests(before, after) if not _accepted_for(f, accepted)]
    drop = coverage_drop(before, after)
    if drop is not None and not any(e.rule == "GRD008" for e in accepted):
        found.append(drop)
    return found
