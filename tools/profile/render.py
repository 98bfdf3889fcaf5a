"""Markdown rendering of a ProfileReport.

Op names, source lines, file names, messages and notes come from the profiled run: each is escaped
where it lands (tools.textsafe), so a hostile name renders as text, not as Markdown or HTML.
"""

from __future__ import annotations

from tools.profile.models import ProfileReport
from tools.textsafe import md_code, md_inline

MAX_SYNC_ROWS = 200  # rows of the syncs table, fallback ops named (a forged profile can name millions)


def _ms(us: float) -> str:
    return f"{us / 1000:.2f} ms"


def _loc(file: str, line: int | None) -> str:
    return f"{file}:{line}"


def render_markdown(r: ProfileReport) -> str:
    lines = ["# Ferry profile", ""]
    lines.append(f"- steps profiled: {r.steps_profiled if r.steps_profiled is not None else 'n/a'}"
                 + (f" ({r.window_wall_s:.3f} s wall)" if r.window_wall_s else ""))
    lines.append(f"- device-to-host syncs: {r.d2h_syncs_total}")
    if r.h2d_copies_per_step is not None:
        lines.append(f"- host-to-device copies per step: {r.h2d_copies_per_step:.1f}")
    shown = list(r.fallback_ops.items())[:MAX_SYNC_ROWS]
    more = f", {len(r.fallback_ops) - len(shown)} more" if len(r.fallback_ops) > len(shown) else ""
    lines.append(f"- time in CPU-fallback ops: {_ms(r.fallback_time_us)}"
                 + (f" ({', '.join(f'{md_inline(k)} x{v}' for k, v in shown)}{more})" if r.fallback_ops else ""))
    lines.append(f"- graph breaks: {sum(g.count for g in r.graph_breaks)}, "
                 f"recompiles: {sum(x.count for x in r.recompiles)}")
    if r.trace_path:
        lines.append(f"- Chrome/Perfetto trace: {md_code(r.trace_path)} (open in https://ui.perfetto.dev)")
    lines += ["", "## Findings", ""]
    if not r.findings:
        lines.append("No findings: no syncs, copies, fallbacks or graph breaks worth acting on.")
    for i, f in enumerate(r.findings, 1):
        loc = f" — {md_code(_loc(f.file, f.line))}" if f.file else ""
        lines.append(f"{i}. **\\[{f.severity}\\] {md_inline(f.title)}**{loc}")
        if f.source:
            lines.append(f"   - code: {md_code(f.source)}")
        lines.append(f"   - {md_inline(f.suggestion, keep_code=True)}")
    for title, rows in (("Top ops by time", r.top_ops_by_time), ("Top ops by count", r.top_ops_by_count),
                        ("torch.profiler window (self CPU time)", r.profiler_top_ops)):
        if not rows:
            continue
        lines += ["", f"## {title}", "", "| op | calls | time | where |", "|---|---:|---:|---|"]
        for o in rows:
            where = "cpu-fallback" if o.cpu_fallback else o.source
            lines.append(f"| {md_code(o.op, table=True)} | {o.count} | {_ms(o.time_us)} | {where} |")
    if r.syncs:
        lines += ["", "## Syncs and copies by source line", "", "| kind | line | count | code |", "|---|---|---:|---|"]
        for s in r.syncs[:MAX_SYNC_ROWS]:
            lines.append(f"| {s.category}:{md_inline(s.kind)} | {md_code(_loc(s.file, s.line), table=True)} "
                         f"| {s.count} | {md_code(s.source, table=True)} |")
        if len(r.syncs) > MAX_SYNC_ROWS:
            lines.append(f"| ... {len(r.syncs) - MAX_SYNC_ROWS} more | | | |")
    for note in r.notes:
        lines += ["", f"> {md_inline(note)}"]
    return "\n".join(lines) + "\n"
