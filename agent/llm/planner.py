"""The model's plan over the scan (under --llm): which files first, which findings first, what to verify.

The model answers through one tool, ``submit_plan``, whose schema derives from :class:`PlanReply`.
Its reply is validated against the scan (:func:`validate_plan`): a file or a finding id the scan did
not find is dropped with a warning, so a plan never names code that is not there. The plan orders
what the report lists and records what to verify; the rewrite stays deterministic (every catalogue
codemod still runs). Any failure (the server, the budget, a reply without a plan) is returned as a
:class:`ModelPlan` with ``error`` set: the offline plan runs and the migration goes on.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from agent.errors import FerryAgentError
from agent.llm.client import ChatClient
from agent.llm.prompts import PLANNER_SYSTEM
from agent.migration.records import ModelPlan, Plan, ScanDigest

logger = logging.getLogger(__name__)

TOOL = "submit_plan"
TURNS = 2  # a reply without a valid plan is sent back once
MAX_FINDINGS_SHOWN = 120
MAX_VERIFY = 12

class PlanReply(BaseModel):
    """Submit the migration plan: files and finding ids (F1, F2...) in the order to work on them, and
    what to verify after the rewrite."""

    files: list[str] = Field(description="repository files from the scan, in the order to migrate and check them")
    findings: list[str] = Field(default_factory=list,
                                description="finding ids from the scan (F1, F2...), most important first")
    verify: list[str] = Field(default_factory=list, description="what to verify after the rewrite, one check each")
    rationale: str = Field(default="", description="one or two sentences: why this order")


def plan_tool() -> dict[str, Any]:
    """The OpenAI tool definition of ``submit_plan``, derived from :class:`PlanReply`."""
    schema = PlanReply.model_json_schema()
    schema.pop("title", None)
    schema.pop("description", None)
    return {"type": "function", "function": {"name": TOOL, "description": (PlanReply.__doc__ or "").strip(),
                                             "parameters": schema}}


def plan_prompt(scan: ScanDigest, offline: Plan) -> str:
    """What the model is shown: the files, every finding with its id, the entry file and the checks."""
    files = sorted({f.file for f in scan.findings})
    lines = [f"Entry file (the run command runs it): {offline.entry_file or 'unknown'}",
             f"Files with findings: {', '.join(files) or 'none'}",
             f"Files the codemods rewrite (offline order): {', '.join(offline.rewrite_files) or 'none'}",
             f"Checks after the rewrite: {', '.join(offline.checks)}",
             "Findings (id file:line [rule, category] message):"]
    items = list(scan.ids().items())
    lines += [f"{fid} {f.file}:{f.line} [{f.rule}, {f.category}] {f.message[:200]}"
              for fid, f in items[:MAX_FINDINGS_SHOWN]]
    if len(items) > MAX_FINDINGS_SHOWN:
        lines.append(f"... and {len(items) - MAX_FINDINGS_SHOWN} more (not shown; they keep the offline order)")
    return "\n".join(lines)


def _norm(rel: str) -> str:
    rel = rel.strip().replace("\\", "/")
    while rel.startswith("./"):
        rel = rel[2:]
    return rel


def _known(names: list[str], norm: Callable[[str], str], known: set[str], what: str, unknown: str,
           warnings: list[str]) -> list[str]:
    """``names`` normalised, in order, without unknown or repeated ones (each dropped with a warning)."""
    kept: list[str] = []
    for raw in names:
        name = norm(raw)
        if name not in known:
            warnings.append(f"dropped {what} {raw!r}: {unknown}")
        elif name in kept:
            warnings.append(f"dropped {what} {raw!r}: named twice")
        else:
            kept.append(name)
    return kept


def validate_plan(reply: PlanReply, scan: ScanDigest, also: list[str]) -> ModelPlan:
    """Keep only what the scan found: files with findings (and ``also``: the entry file) and finding ids;
    each unknown or repeated name is dropped with a warning."""
    warnings: list[str] = []
    files = _known(reply.files, _norm, {f.file for f in scan.findings} | set(also), "file",
                   "not a file the scan found", warnings)
    findings = _known(reply.findings, lambda raw: raw.strip().upper(), set(scan.ids()), "finding",
                      "not a finding id of the scan", warnings)
    verify = [v.strip()[:300] for v in reply.verify if v.strip()]
    if len(verify) > MAX_VERIFY:
        warnings.append(f"kept the first {MAX_VERIFY} of {len(verify)} checks to verify")
        verify = verify[:MAX_VERIFY]
    return ModelPlan(files=files, findings=findings, verify=verify, rationale=reply.rationale.strip()[:600],
                     warnings=warnings)


def _reply_plan(msg: Any) -> PlanReply:
    """The ``submit_plan`` call in a reply; ValueError says what is wrong with it."""
    calls = [tc for tc in getattr(msg, "tool_calls", None) or [] if tc.function.name == TOOL]
    if not calls:
        names = [tc.function.name for tc in getattr(msg, "tool_calls", None) or []]
        raise ValueError(f"the reply did not call {TOOL}" + (f" (it called {', '.join(names)})" if names else
                                                             f": {(getattr(msg, 'content', '') or '')[:200]!r}"))
    try:
        return PlanReply.model_validate(json.loads(calls[0].function.arguments or "{}"))
    except (json.JSONDecodeError, ValidationError) as exc:
        raise ValueError(f"the {TOOL} arguments do not match its schema: {exc}") from exc


def _message_dict(msg: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"role": "assistant", "content": getattr(msg, "content", None) or ""}
    calls = getattr(msg, "tool_calls", None) or []
    if calls:
        out["tool_calls"] = [{"id": tc.id, "type": "function",
                              "function": {"name": tc.function.name, "arguments": tc.function.arguments or ""}}
                             for tc in calls]
    return out


def ask_plan(client: ChatClient, scan: ScanDigest, offline: Plan) -> ModelPlan:
    """The model's validated plan, or a ModelPlan whose ``error`` says why there is none."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": PLANNER_SYSTEM},
                                      {"role": "user", "content": plan_prompt(scan, offline)}]
    problem = ""
    for _turn in range(TURNS):
        try:
            msg = client.chat(messages, [plan_tool()])
        except FerryAgentError as exc:
            return ModelPlan(error=f"{exc.status}: {exc}")
        except Exception as exc:  # a misbehaving server must not end the migration at plan time
            logger.warning("the plan request failed: %s: %s", type(exc).__name__, exc)
            return ModelPlan(error=f"the plan request failed: {type(exc).__name__}: {exc}")
        try:
            reply = _reply_plan(msg)
        except ValueError as exc:
            problem = str(exc)
            messages.append(_message_dict(msg))
            ids = [tc.id for tc in getattr(msg, "tool_calls", None) or []]
            messages += [{"role": "tool", "tool_call_id": i, "content": json.dumps({"error": problem})} for i in ids]
            messages.append({"role": "user", "content": f"{problem}. Call {TOOL} with the plan."})
            continue
        return validate_plan(reply, scan, [offline.entry_file] if offline.entry_file else [])
    return ModelPlan(error=f"the model gave no valid plan in {TURNS} replies: {problem}")
