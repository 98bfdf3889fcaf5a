"""SARIF 2.1.0 export of a ScanReport (for code-scanning UIs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote

from tools import doclinks
from tools.codemods.registry import all_rules
from tools.scan.models import ScanReport

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
_LEVEL = {"auto": "warning", "review": "warning", "unsupported": "error"}


def sentences(*parts: str) -> str:
    """``parts`` as one text, each a sentence: ended by a full stop unless it has its own ending
    (".cuda() moves to a CUDA device. Suggested: .to(device)."), empty parts left out."""
    out = []
    for part in parts:
        part = part.strip()
        if part:
            out.append(part if part[-1] in ".!?" else part + ".")
    return " ".join(out)


def to_sarif(report: ScanReport) -> dict[str, Any]:
    rules = list(all_rules())
    index = {r.ID: i for i, r in enumerate(rules)}
    driver = {
        "name": "ferry-scan",
        "informationUri": doclinks.home_url(),
        "version": "0.1.0",
        "rules": [{
            "id": r.ID,
            "name": r.NAME,
            "shortDescription": {"text": r.NAME},
            "fullDescription": {"text": r.DESCRIPTION},
            "helpUri": doclinks.absolute(doclinks.idiom(r.ID)),
            "help": {"text": f"{r.DESCRIPTION} See {doclinks.absolute(doclinks.idiom(r.ID))}"},
            "defaultConfiguration": {"level": _LEVEL[r.CATEGORY]},
            "properties": {"category": r.CATEGORY, "catalogueEntries": list(r.ENTRIES)},
        } for r in rules],
    }
    results = []
    for f in report.findings:
        text = sentences(f.message, f"Suggested: {f.rewrite}" if f.rewrite else "")
        result: dict[str, Any] = {
            "ruleId": f.rule_id,
            "ruleIndex": index[f.rule_id],
            "level": _LEVEL[f.category],
            "message": {"text": text},
            "locations": [{"physicalLocation": {
                "artifactLocation": {"uri": quote(f.file), "uriBaseId": "SRCROOT"},
                "region": {"startLine": f.line, "startColumn": f.col, "endLine": f.end_line,
                           "endColumn": f.end_col, "snippet": {"text": f.snippet}},
            }}],
            "properties": {"category": f.category, "blocks": f.blocks},
        }
        if f.cell is not None:
            result["properties"]["notebookCell"] = f.cell
        results.append(result)
    notifications = [{"level": "note" if n.kind.startswith("skipped") else "warning",
                      "message": {"text": f"{n.file}: {n.kind}: {n.message}"}} for n in report.notes]
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": driver},
            "originalUriBaseIds": {"SRCROOT": {"uri": Path(report.root).as_uri().rstrip("/") + "/"}},
            "results": results,
            "invocations": [{"executionSuccessful": True, "toolExecutionNotifications": notifications}],
        }],
    }
