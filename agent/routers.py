"""Routers: pure functions from the state (read through ``agent.state``'s typed readers) to the next node."""

from __future__ import annotations

from typing import Literal

from agent.state import State, cpu_check_of, last_run, llm_option, options_of, parity_of


def explain_or_report(state: State) -> Literal["llm_explain", "report"]:
    """An environment failure under --llm gets the model's explanation (no tools) before the report."""
    return "llm_explain" if state.get("status") == "failed_environment" and llm_option(state) else "report"


def after_ingest(state: State) -> Literal["reference_run", "report"]:
    return "report" if state.get("status") else "reference_run"


def after_reference(state: State) -> Literal["scan", "llm_explain", "report"]:
    return explain_or_report(state) if state.get("status") else "scan"


def after_step(state: State) -> Literal["next", "report"]:
    """For linear steps (scan, plan, rewrite): go on unless a status ended the migration."""
    return "report" if state.get("status") else "next"


def after_target(state: State) -> Literal["parity", "diagnose", "llm_explain", "report"]:
    """After ``await_reference``: the target run's outcome (the reference settled, or it ended it)."""
    if state.get("status"):
        return explain_or_report(state)
    run = last_run(state)
    return "parity" if run is not None and run.ok else "diagnose"


def after_diagnose(state: State) -> Literal["apply_fix", "llm_fix", "llm_explain", "report"]:
    if state.get("status"):
        return explain_or_report(state)
    if state.get("proposal"):
        return "apply_fix"
    return "llm_fix" if llm_option(state) else "report"


def after_llm(state: State) -> Literal["apply_fix", "report"]:
    if state.get("status"):
        return "report"
    return "apply_fix" if state.get("proposal") else "report"


def after_apply(state: State) -> Literal["target_run", "report"]:
    return "report" if state.get("status") else "target_run"


def after_parity(state: State) -> Literal["tests", "cpu_check", "apply_fix", "llm_fix", "report"]:
    """A rule's fix first; a failure no rule explains goes to the model under --llm (the parity node
    ends the migration ``partial`` without it); a pass, or nothing to compare, goes on to the tests,
    or the CPU check (the report node then says which)."""
    if state.get("status"):
        return "report"
    if state.get("proposal"):
        return "apply_fix"
    report = parity_of(state)
    if report is not None and report.failed:
        return "llm_fix" if llm_option(state) else "report"
    return "tests" if options_of(state).test_command else "cpu_check"


def after_tests(state: State) -> Literal["cpu_check", "diagnose", "report"]:
    if state.get("status"):
        return "report"
    run = last_run(state)
    return "cpu_check" if run is not None and run.ok else "diagnose"


def after_cpu_check(state: State) -> Literal["profile", "llm_fix", "report"]:
    """The CPU guard's outcome is the report node's to judge; the profile still runs. A model's edit
    the guard rejected (and reverted) goes back to the model, told why."""
    if state.get("status"):
        return "report"
    check = cpu_check_of(state)
    if check is not None and check.rejected_edit is not None and llm_option(state):
        return "llm_fix"
    return "profile"
