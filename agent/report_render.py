"""Render a migration's state as result.json and report.md."""

from __future__ import annotations

import logging
import re
from typing import Any

from agent.state import MigrationState, options_of
from tools.textsafe import md_code, md_inline

logger = logging.getLogger(__name__)


def result_json(state: MigrationState, patch_files: list[dict[str, Any]]) -> dict[str, Any]:
    opts = options_of(state)
    runs = state.get("runs") or []
    usage = state.get("llm_usage") or {}
    parity = state.get("parity") or {}
    return {
        "migration_id": state.get("migration_id"),
        "status": state.get("status"),
        "summary": state.get("summary"),
        "source": opts.source,
        "run_command": opts.run_command,
        "test_command": opts.test_command,
        "iterations": state.get("iteration") or 0,
        "runs": len(runs),
        "run_log": runs,
        "llm": {"calls": int(usage.get("calls", 0)), "prompt_tokens": int(usage.get("prompt_tokens", 0)),
                "completion_tokens": int(usage.get("completion_tokens", 0)),
                "total_tokens": int(usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0))},
        "wall_time_s": round(float(state.get("elapsed_s") or 0.0), 3),
        "edits": [{k: e.get(k) for k in ("step", "kind", "rule", "site", "files", "reason")} for e in state.get("edits") or []],
        "patch_files": patch_files,
        "parity": {"passed": parity_passed_or_none(parity)},
        "profile": {"findings": len((state.get("profile") or {}).get("findings") or []),
                    "error": (state.get("profile") or {}).get("error")},
        "steps": state.get("steps") or [],
    }


def parity_passed_or_none(parity: dict[str, Any]) -> bool | None:
    if not parity:
        return None
    from agent.nodes.parity import parity_passed

    return parity_passed(parity)


def _entries(parity: dict[str, Any]) -> list[dict[str, Any]]:
    for key in ("entries", "tensors", "results", "comparisons", "items"):
        if isinstance(parity.get(key), list):
            return parity[key]
    return []


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.3g}"
    return "" if v is None else str(v)


def parity_table(parity: dict[str, Any], limit: int = 30) -> list[str]:
    rows = _entries(parity)
    if not rows:
        return ["(no per-tensor entries in the parity report)"]
    out = ["| tensor | cosine | max abs | max rel | tier | verdict |", "|---|---|---|---|---|---|"]
    for r in rows[:limit]:
        name = r.get("name") or r.get("key") or r.get("module") or "?"
        verdict = r.get("verdict") or r.get("status") or ("pass" if r.get("passed") else "fail" if r.get("passed") is False else "")
        out.append(f"| {md_code(str(name), table=True)} | {_fmt(r.get('cosine'))} | {_fmt(r.get('max_abs'))} | "
                   f"{_fmt(r.get('max_rel'))} | {md_inline(_fmt(r.get('tier') or r.get('decided_by')), table=True)} | "
                   f"{md_inline(str(verdict), table=True)} |")
    if len(rows) > limit:
        out.append(f"| ... {len(rows) - limit} more | | | | | |")
    return out


def profile_lines(profile: dict[str, Any] | None, limit: int = 15) -> list[str]:
    if not profile:
        return ["(no profile)"]
    findings = profile.get("findings") or []
    if profile.get("error"):
        return [f"Profiling failed: {md_inline(str(profile['error']), keep_code=True)}"]
    if not findings:
        return ["No findings."]
    out = []
    for f in findings[:limit]:
        where = f.get("location") or f.get("source") or f.get("site") or ""
        if isinstance(where, dict):
            where = f"{where.get('file', '')}:{where.get('line', '')}"
        out.append(f"- **{md_inline(str(f.get('kind') or f.get('title') or 'finding'))}** {md_inline(str(where))}: "
                   f"{md_inline(str(f.get('message') or f.get('detail') or ''), keep_code=True)}"
                   + (f" — suggestion: {md_inline(str(f['suggestion']), keep_code=True)}" if f.get("suggestion") else ""))
    return out


def report_markdown(state: MigrationState, patch: str) -> str:
    opts = options_of(state)
    status = state.get("status")
    lines = [f"# Ferry migration {md_inline(str(state.get('migration_id')))}", "",
             f"- repository: {md_code(opts.source)}", f"- run: {md_code(opts.run_command)}",
             f"- tests: {md_code(opts.test_command or '(none)')}", f"- **status: {status}**",
             f"- iterations: {state.get('iteration') or 0}, runs: {len(state.get('runs') or [])}, "
             f"wall time: {float(state.get('elapsed_s') or 0):.1f}s", ""]
    if state.get("summary"):  # run-derived text (trace messages, stderr): escaped
        lines += [md_inline(str(state["summary"]), keep_code=True), ""]
    lines += ["## Steps", "", "| step | what happened | seconds |", "|---|---|---|"]
    for s in state.get("steps") or []:
        lines.append(f"| {s['node']} | {md_inline(str(s.get('summary', '')), keep_code=True, table=True)} | "
                     f"{s.get('seconds', 0):.2f} |")
    lines += ["", "## What changed and why", ""]
    edits = state.get("edits") or []
    if not edits:
        lines.append("No edits.")
    for e in edits:
        diff = (e.get("diff") or "").rstrip()
        fence = "`" * max(3, 1 + max((len(m) for m in re.findall(r"`+", diff)), default=0))
        lines += [f"### {e.get('step')}: {e.get('rule')} ({e.get('kind')})", "",  # Ferry's own step and rule ids
                  md_inline(str(e.get("reason") or ""), keep_code=True), "", f"{fence}diff", diff, fence, ""]
    lines += ["## Parity", ""]
    parity = state.get("parity")
    if parity:
        from agent.nodes.parity import first_divergence, parity_passed

        lines.append(f"Verdict: **{'pass' if parity_passed(parity) else 'fail'}**; first divergence: "
                     f"{md_inline(first_divergence(parity))}")
        lines += [""] + parity_table(parity)
    else:
        lines.append("Not checked (the migration stopped before the parity step).")
    lines += ["", "## Profile findings", ""] + profile_lines(state.get("profile"))
    lines += ["", "## Left for a human", ""]
    left = []
    if status != "migrated":
        left.append(f"- The migration ended with **{status}**: {md_inline(str(state.get('summary') or ''), keep_code=True)}")
    for f in (state.get("plan") or {}).get("review", []):
        where = md_code(f"{f.get('file')}:{f.get('line')}")
        left.append(f"- {where} [{f.get('rule')}, {f.get('category')}] {md_inline(str(f.get('message')), keep_code=True)}")
    lines += left or ["Nothing."]
    lines += ["", f"Patch: {len(patch.splitlines())} lines (ferry.patch)."]
    return "\n".join(lines) + "\n"
