"""Routers: pure functions from the state to the name of the next node."""

from __future__ import annotations

import logging
from typing import Any, Literal, Mapping

logger = logging.getLogger(__name__)


def _ok(run: Mapping[str, Any] | None) -> bool:
    return bool(run) and run.get("status") == "ok" and run.get("exit_code") == 0  # type: ignore[union-attr]


def parity_passed(report: Mapping[str, Any]) -> bool:
    """Whether a parity report (ParityReport JSON, or a summary with ``passed``) passes; warn passes."""
    for key in ("passed", "ok", "pass_"):
        if isinstance(report.get(key), bool):
            return report[key]
    verdict = str(report.get("verdict") or report.get("status") or "").lower()
    return verdict in ("pass", "passed", "ok", "warn", "warning")


def after_ingest(state: Mapping[str, Any]) -> Literal["reference_run", "report"]:
    return "report" if state.get("status") else "reference_run"


def after_reference(state: Mapping[str, Any]) -> Literal["scan", "report"]:
    return "report" if state.get("status") else "scan"


def after_step(state: Mapping[str, Any]) -> Literal["next", "report"]:
    """For linear steps (scan, plan, rewrite): go on unless a status ended the migration."""
    return "report" if state.get("status") else "next"


def after_target(state: Mapping[str, Any]) -> Literal["parity", "diagnose", "report"]:
    if state.get("status"):
        return "report"
    return "parity" if _ok(state.get("last_run")) else "diagnose"


def after_diagnose(state: Mapping[str, Any]) -> Literal["apply_fix", "llm_fix", "report"]:
    if state.get("status"):
        return "report"
    if state.get("proposal"):
        return "apply_fix"
    return "llm_fix" if (state.get("options") or {}).get("llm") else "report"


def after_llm(state: Mapping[str, Any]) -> Literal["apply_fix", "report"]:
    if state.get("status"):
        return "report"
    return "apply_fix" if state.get("proposal") else "report"


def after_apply(state: Mapping[str, Any]) -> Literal["target_run", "report"]:
    return "report" if state.get("status") else "target_run"


def after_parity(state: Mapping[str, Any]) -> Literal["tests", "profile", "apply_fix", "llm_fix", "report"]:
    """A rule's fix first; a failure no rule explains goes to the model under --llm (the parity node
    ends the migration ``partial`` without it); a pass goes on to the tests, or the profile."""
    if state.get("status"):
        return "report"
    if state.get("proposal"):
        return "apply_fix"
    report = state.get("parity")
    if report and not parity_passed(report):
        return "llm_fix" if (state.get("options") or {}).get("llm") else "report"
    return "tests" if (state.get("options") or {}).get("test_command") else "profile"


def after_tests(state: Mapping[str, Any]) -> Literal["profile", "diagnose", "report"]:
    if state.get("status"):
        return "report"
    return "profile" if _ok(state.get("last_run")) else "diagnose"
