"""Routers: pure functions from the state (read through ``agent.migration.state``'s typed readers) to the next node."""

from __future__ import annotations

from typing import Literal

from agent.migration.records import SpeculationPhase
from agent.migration.state import (
    State,
    cost_question_of,
    cpu_check_of,
    files_of,
    findings_worth_a_change,
    has_proposal,
    last_run,
    llm_option,
    options_of,
    parity_of,
    profile_round_of,
    speculation_of,
    status_of,
)
from agent.migration.workspace import code_digest

# Statuses that end the migration even while the model's profile change is verified (a Ferry bug, a
# missing tool, outputs that cannot be written); any other failure on that way only rejects the change.
ENDING = frozenset({"failed_internal", "failed_tool_unavailable", "failed_output"})


def verifying_profile_change(state: State) -> bool:
    """Whether the model's profile change is on its way through the verification."""
    rnd = profile_round_of(state)
    return rnd is not None and rnd.phase == "verifying"


def explain_or_report(state: State) -> Literal["llm_explain", "report"]:
    """An environment failure under --llm gets the model's explanation (no tools) before the report."""
    return "llm_explain" if status_of(state) == "failed_environment" and llm_option(state) else "report"


def _stopped(state: State) -> Literal["profile_revert", "llm_explain", "report"]:
    """Where a status sends the graph: to the report (through the model's explanation of an environment
    failure under --llm), or, while the model's profile change is verified, back to the last verified
    state (the change failed, the migration stands)."""
    if verifying_profile_change(state) and status_of(state) not in ENDING:
        return "profile_revert"
    return explain_or_report(state)


def evidence_phase(state: State) -> SpeculationPhase | None:
    """The phase of this round's evidence run (``agent.migration.nodes.evidence``); None: there is none."""
    spec = speculation_of(state)
    if spec is None or spec.files_digest != code_digest(files_of(state)):
        return None
    return spec.phase


def after_ingest(state: State) -> Literal["reference_run", "report"]:
    return "report" if status_of(state) else "reference_run"


def after_reference(state: State) -> Literal["scan", "llm_explain", "report"]:
    return explain_or_report(state) if status_of(state) else "scan"


def after_step(state: State) -> Literal["next", "report"]:
    """For linear steps (scan, plan, rewrite): go on unless a status ended the migration."""
    return "report" if status_of(state) else "next"


def after_target(state: State) -> Literal["parity", "diagnose", "profile_revert", "llm_explain", "report"]:
    """After ``await_reference``: the target run's outcome (the reference settled, or it ended it)."""
    if status_of(state):
        return _stopped(state)
    if evidence_phase(state) == "pending":  # the evidence run ended after its steps: parity judges it
        return "parity"
    run = last_run(state)
    if run is not None and run.ok:
        return "parity"
    return "profile_revert" if verifying_profile_change(state) else "diagnose"


def after_diagnose(state: State) -> Literal["apply_fix", "llm_fix", "profile_revert", "llm_explain", "report"]:
    if status_of(state):
        return _stopped(state)
    if has_proposal(state):
        return "apply_fix"
    return "llm_fix" if llm_option(state) else "report"


def after_llm(state: State) -> Literal["apply_fix", "approve_cost", "report"]:
    if status_of(state):
        return "report"
    if cost_question_of(state) is not None:
        return "approve_cost"
    return "apply_fix" if has_proposal(state) else "report"


def after_apply(state: State) -> Literal["target_run", "profile_revert", "llm_explain", "report"]:
    return _stopped(state) if status_of(state) else "target_run"


AfterParity = Literal["tests", "cpu_check", "apply_fix", "llm_fix", "profile_revert", "llm_explain", "report",
                      "target_run"]


def after_parity(state: State) -> AfterParity:
    """A rule's fix first; a failure no rule explains goes to the model under --llm (the parity node
    ends the migration ``partial`` without it); a pass, or nothing to compare, goes on to the tests,
    or the CPU check (the report node then says which). A failure of the model's profile change
    reverts it. Evidence that cannot settle its round (``agent.migration.nodes.evidence.decline``) sends the
    graph back to the target run, for the full plain run."""
    if status_of(state):
        return _stopped(state)
    if evidence_phase(state) == "declined":
        return "target_run"
    report = parity_of(state)
    if verifying_profile_change(state) and (has_proposal(state) or (report is not None and report.failed)):
        return "profile_revert"
    if has_proposal(state):
        return "apply_fix"
    if report is not None and report.failed:
        return "llm_fix" if llm_option(state) else "report"
    return "tests" if options_of(state).test_command else "cpu_check"


def after_tests(state: State) -> Literal["cpu_check", "diagnose", "profile_revert", "llm_explain", "report"]:
    if status_of(state):
        return _stopped(state)
    run = last_run(state)
    if run is not None and run.ok:
        return "cpu_check"
    return "profile_revert" if verifying_profile_change(state) else "diagnose"


def after_cpu_check(state: State) -> Literal["profile", "llm_fix", "profile_revert", "llm_explain", "report"]:
    """The CPU guard's outcome is the report node's to judge; the profile still runs. A model's edit
    the guard rejected (and reverted) goes back to the model, told why; while the model's profile change
    is verified, ``profile_verdict`` judges it instead."""
    if status_of(state):
        return _stopped(state)
    check = cpu_check_of(state)
    if (check is not None and check.rejected_edit is not None and llm_option(state)
            and not verifying_profile_change(state)):
        return "llm_fix"
    return "profile"


def after_profile(state: State) -> Literal["profile_llm", "profile_verdict", "profile_revert", "llm_explain", "report"]:
    """Under --llm, once per migration: a verified migration whose profile has findings worth a change
    asks the model for one; the model's change, back from its verification, is judged."""
    if status_of(state):
        return _stopped(state)
    if verifying_profile_change(state):
        return "profile_verdict"
    if not llm_option(state) or profile_round_of(state) is not None or not findings_worth_a_change(state):
        return "report"
    from agent.migration.nodes.report import final_status  # the evidence ``migrated`` needs: only such code is tuned

    return "profile_llm" if final_status(state)[0] == "migrated" else "report"


def after_profile_llm(state: State) -> Literal["apply_fix", "report"]:
    if status_of(state):
        return "report"
    return "apply_fix" if has_proposal(state) else "report"


def after_cost(state: State) -> Literal["llm_fix", "report"]:
    """After the question on the cost cap: the fix again with more allowed, or the report."""
    return "report" if status_of(state) else "llm_fix"
