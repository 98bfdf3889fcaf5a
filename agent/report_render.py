"""Render a migration's state as result.json and report.md."""

from __future__ import annotations

import logging
from typing import Any

from agent.state import MigrationState, options_of

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
        out.append(f"| {name} | {_fmt(r.get('cosine'))} | {_fmt(r.get('max_abs'))} | {_fmt(r.get('max_rel'))} | "
                   f"{_fmt(r.get('tier') or r.get('decided_by'))} | {verdict} |")
    if len(rows) > limit:
        out.append(f"| ... {len(rows) - limit} more | | | | | |")
    return out


def profile_lines(profile: dict[str, Any] | None, limit: int = 15) -> list[str]:
    if not profile:
        return ["(no profile)"]
    findings = profile.get("findings") or []
    if profile.get("error"):
        return [f"Profiling failed: {profile['error']}"]
    if not findings:
        return ["No findings."]
    out = []
    for f in findings[:limit]:
        where = f.get("location") or f.get("source") or f.get("site") or ""
        if isinstance(where, dict):
            where = f"{where.get('file', '')}:{where.get('line', '')}"
        out.append(f"- **{f.get('kind') or f.get('title') or 'finding'}** {where}: {f.get('message') or f.get('detail') or ''}"
                   + (f" — suggestion: {f['suggestion']}" if f.get("suggestion") else ""))
    return out


def report_markdown(state: MigrationState, patch: str) -> str:
    opts = options_of(state)
    status = state.get("status")
    lines = [f"# Ferry migration {state.get('migration_id')}", "",
             f"- repository: `{opts.source}`", f"- run: `{opts.run_command}`",
             f"- tests: `{opts.test_command or '(none)'}`", f"- **status: {status}**",
             f"- iterations: {state.get('iteration') or 0}, runs: {len(state.get('runs') or [])}, "
             f"wall time: {float(state.get('elapsed_s') or 0):.1f}s", ""]
    if state.get("summary"):
        lines += [state["summary"], ""]
    lines += ["## Steps", "", "| step | what happened | seconds |", "|---|---|---|"]
    for s in state.get("steps") or []:
        lines.append(f"| {s['node']} | {str(s.get('summary', '')).replace('|', '/')} | {s.get('seconds', 0):.2f} |")
    lines += ["", "## What changed and why", ""]
    edits = state.get("edits") or []
    if not edits:
        lines.append("No edits.")
    for e in edits:
        lines += [f"### {e.get('step')}: {e.get('rule')} ({e.get('kind')})", "", e.get("reason") or "", "",
                  "```diff", (e.get("diff") or "").rstrip(), "```", ""]
    lines += ["## Parity", ""]
    parity = state.get("parity")
    if parity:
        from agent.nodes.parity import first_divergence, parity_passed

        lines.append(f"Verdict: **{'pass' if parity_passed(parity) else 'fail'}**; first divergence: {first_divergence(parity)}")
        lines += [""] + parity_table(parity)
    else:
        lines.append("Not checked (the migration stopped before the parity step).")
    lines += ["", "## Profile findings", ""] + profile_lines(state.get("profile"))
    lines += ["", "## Left for a human", ""]
    left = []
    if status != "migrated":
        left.append(f"- The migration ended with **{status}**: {state.get('summary') or ''}")
    for f in (state.get("plan") or {}).get("review", []):
        left.append(f"- `{f.get('file')}:{f.get('line')}` [{f.get('rule')}, {f.get('category')}] {f.get('message')}")
    lines += left or ["Nothing."]
    lines += ["", f"Patch: {len(patch.splitlines())} lines (ferry.patch)."]
    return "\n".join(lines) + "\n"
