"""The test guard in the graph (docs/guard.md): every edit ``apply_fix`` applies (a rule's, the model's, a
person's, the model's profile change) is read by ``tools.guard.static`` before it is made, and every tests
run of the migrated code is compared with the test command's run on the original (``tools.guard.outcomes``).

A finding ends the migration ``guard_refused`` with its rule and site, unless the user approves it under
``--approve`` (the approval request carries the findings; an approval is recorded as ``accepted``). The
policy's FIX008 in a test module is recorded as the documented exception.
"""

from __future__ import annotations

from typing import Any

from langgraph.types import interrupt

from agent.migration import adapters
from agent.migration.budget import ensure_time_for, run_timeout
from agent.migration.nodes.common import SUMMARY, Update, artifacts_dir, source_of
from agent.migration.records import GuardEvent, RunRecord, tests_of
from agent.migration.runs import finished
from agent.migration.state import (
    MigrationState,
    dump,
    files_of,
    guard_events_of,
    options_of,
    reference_tests_of,
)
from agent.migration.workspace import current_text
from tools.guard.models import RULES, FileEdit, GuardFinding, GuardNote, GuardRequest, GuardResult, TestsSnapshot
from tools.guard.outcomes import lost_tests
from tools.guard.static import check_patch
from tools.runner.models import RunResult

REFERENCE_TESTS = "reference-tests"


def static_check(state: MigrationState, files: dict[str, str]) -> GuardResult:
    """The guard's reading of an edit: ``files`` (path -> new text) against what the workspace holds now."""
    source = source_of(state)
    prev = files_of(state)
    edits = [FileEdit(path=rel, before=current_text(source, prev, rel), after=text)
             for rel, text in sorted(files.items())]
    before = reference_tests_of(state)
    passed = [n for n, o in before.outcomes.items() if o == "passed"] if before is not None else None
    return check_patch(GuardRequest(files=edits, passed_on_reference=passed))


def event(finding: GuardFinding | GuardNote, decision: str, step: str) -> dict[str, Any]:
    if isinstance(finding, GuardNote):
        site = f"{finding.file}:{finding.line}" if finding.line is not None else finding.file
        return dump(GuardEvent(decision="exception", rule=finding.rule, name="documented exception", site=site,
                               detail=finding.detail, step=step))
    return dump(GuardEvent(decision=decision,  # type: ignore[arg-type]
                           rule=finding.rule, name=RULES[finding.rule][0], site=finding.site, test=finding.test,
                           detail=finding.detail, step=step))


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


def _run_reference_tests(state: MigrationState) -> RunResult:
    opts = options_of(state)
    adir = artifacts_dir(state, REFERENCE_TESTS)
    done = finished(adir)
    if done is not None:
        return done
    ensure_time_for(state, "reference_tests", "the tests on the original code (the test guard's reference)")
    return adapters.run(source_of(state), opts.test_command or "", device="cpu", redirect_cuda="cpu", probe=False,
                        profile=False, timeout_s=run_timeout(state), seed=opts.seed, artifacts_dir=adir,
                        disk_limit_bytes=opts.disk_limit_bytes, environment=adapters.RunEnvironment.of(opts))


def reference_tests(state: MigrationState) -> Update:
    """The test command's run on the original code (CUDA redirected to CPU, as the reference run), once:
    the tests it collects and how each ends are what the migrated code's tests are held to."""
    if reference_tests_of(state) is not None or not options_of(state).test_command:
        return {}
    run = _run_reference_tests(state)
    snap = TestsSnapshot.of(tests_of(run), run.status)
    return {"reference_tests": dump(snap), "runs": [dump(RunRecord.of("reference_tests", run))]}


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
    return [f for f in lost_tests(before, after) if not _accepted_for(f, accepted)]
