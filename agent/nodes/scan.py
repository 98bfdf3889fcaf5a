"""scan: find the CUDA idioms in the original code."""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

from agent import toolbox
from agent.nodes.common import source_of, step
from agent.state import MigrationState

logger = logging.getLogger(__name__)


def findings_of(report: dict[str, Any]) -> list[dict[str, Any]]:
    return list(report.get("findings") or report.get("items") or [])


def category_of(f: dict[str, Any]) -> str:
    return str(f.get("category") or f.get("kind") or "unknown").replace("-", "_")


@step("scan")
def scan(state: MigrationState) -> dict[str, Any]:
    if state.get("scan"):
        return {"_summary": "already done"}
    report = toolbox.scan(source_of(state))
    findings = findings_of(report)
    counts = Counter(category_of(f) for f in findings)
    keep = [
        {"rule": f.get("rule_id") or f.get("rule"), "file": f.get("file") or f.get("path"),
         "line": f.get("line"), "category": category_of(f),
         "message": f.get("message") or f.get("reason") or f.get("proposed") or ""}
        for f in findings
    ]
    return {"scan": {"counts": dict(counts), "findings": keep},
            "_summary": ", ".join(f"{n} {c}" for c, n in sorted(counts.items())) or "no CUDA idioms found"}
