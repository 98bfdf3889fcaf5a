"""build_profile_report: turns a profile directory into findings with concrete suggestions."""

from __future__ import annotations

import os
from pathlib import Path

from sandbox.artifacts import ArtifactMissing, ArtifactRefused, is_regular_file, write_text
from tools.artifact_json import InvalidArtifact, load_json, validate
from tools.profile.child import PROFILE_JSON
from tools.profile.models import CompileEvent, DeviceWork, OpRow, ProfileFinding, ProfileReport, Severity, SyncSite
from tools.profile.profile_doc import ProfileDoc
from tools.profile.suggestions import (
    DATA_DEPENDENT_SUGGESTIONS,
    DEFAULT_FALLBACK,
    GRAPH_BREAK_HINTS,
    H2D_SUGGESTION,
    RECOMPILE_SUGGESTION,
    SYNC_SUGGESTIONS,
)
from tools.profile.syncs import DATA_DEPENDENT
from tools.profile.tpx_model import TpxStats

TOP_N = 15
REPORT_MD = "profile.md"
MAX_FINDINGS = 200  # the most urgent ones; a real profile has a few dozen, a forged one any number


class ProfileError(ValueError):
    """The directory is not a readable profile."""


def _where(file: str | None, line: int | None) -> str:
    return f"{file}:{line}" if file else "an unknown line"


def _profiler_rows(doc: ProfileDoc) -> list[OpRow]:
    return [OpRow(op=o.op, count=o.count, time_us=o.self_cpu_us, source="torch.profiler") for o in doc.ops]


def _tpx_rows(doc: ProfileDoc) -> list[OpRow]:
    """tpx ops of the profiled window (the whole run when there was no window)."""
    tpx = doc.tpx_window or doc.tpx or TpxStats()
    fallback = set(tpx.fallback_ops)
    return [OpRow(op=o.op, count=o.count, time_us=o.time_s * 1e6, source="tpx",
                  cpu_fallback=o.op in fallback or o.fallback_calls > 0)
            for o in tpx.ops]


def _relative(path: str | None, root: Path) -> str | None:
    """``path`` relative to ``root`` when it lies inside it. ``path`` comes from the run: it is
    only normalised as text, never resolved on the host's filesystem."""
    if not path or "\0" in path:
        return None
    try:
        p = Path(os.path.abspath(path))
        for base in dict.fromkeys((Path(os.path.abspath(root)), root.resolve())):
            if p.is_relative_to(base):
                return os.path.relpath(p, base)
    except (OSError, ValueError):
        pass
    return None


def _compile_events(doc: ProfileDoc, root: Path) -> tuple[list[CompileEvent], list[CompileEvent]]:
    dyn = doc.dynamo
    breaks: list[CompileEvent] = []
    recompiles: list[CompileEvent] = []
    # Events of the same site and reason are merged through a dict: the run chooses how many events
    # there are (millions fit in the file cap), so no step here may scan the ones seen so far.
    seen: dict[tuple[str, str | None, int | None, str], CompileEvent] = {}
    for e in dyn.events:
        # innermost user frame: the last location inside the repo (tracebacks list outer frames first)
        user = [(rel, line) for f, line in e.locations if (rel := _relative(f, root))]
        loc = user[-1] if user else (None, None)
        reason = e.message.strip()
        key = (e.kind, loc[0], loc[1], reason)
        same = seen.get(key)
        if same:
            same.count += 1
        else:
            seen[key] = CompileEvent(kind=e.kind, reason=reason, file=loc[0], line=loc[1])
            (breaks if e.kind == "graph_break" else recompiles).append(seen[key])
    if not breaks:
        for reason, n in (dyn.counters.get("graph_break") or {}).items():
            breaks.append(CompileEvent(kind="graph_break", reason=reason, count=n))
    return breaks, recompiles


def _findings(report: ProfileReport, steps: int | None) -> list[ProfileFinding]:
    out: list[ProfileFinding] = []
    for s in report.syncs:
        where = _where(s.file, s.line)
        if s.category == "d2h_sync":
            if s.kind in DATA_DEPENDENT:
                hint = DATA_DEPENDENT_SUGGESTIONS.get(s.kind, DEFAULT_FALLBACK)
                text = f"`{s.kind}` has a data-dependent output size and syncs ({s.count}x at {where}): {hint}."
            else:
                text = SYNC_SUGGESTIONS.get(s.kind, "this call waits for the device ({n}x at {where}).").format(
                    n=s.count, where=where)
            sev: Severity = "high" if s.count >= 10 else "medium" if s.count >= 2 else "low"
            out.append(ProfileFinding(kind="host_sync", severity=sev, title=f"device-to-host sync: {s.kind}",
                                      suggestion=text, file=s.file, line=s.line, source=s.source, count=s.count))
        else:
            per_step = s.window_count / steps if steps else float(s.count)
            sev = "high" if per_step >= 1 else "medium" if s.window_count else "low"
            out.append(ProfileFinding(kind="h2d_copy", severity=sev, title=f"host-to-device copy: {s.kind}",
                               suggestion=H2D_SUGGESTION.format(n=s.count, where=where, per_step=per_step),
                               file=s.file, line=s.line, source=s.source, count=s.count))
    first_sync: dict[str, SyncSite] = {}
    for s in report.syncs:
        first_sync.setdefault(s.kind, s)
    for op, n in sorted(report.fallback_ops.items(), key=lambda kv: -kv[1]):
        base = op.split("::")[-1].split(".")[0]
        site = first_sync.get(base)
        hint = DATA_DEPENDENT_SUGGESTIONS.get(base, DEFAULT_FALLBACK)
        out.append(ProfileFinding(kind="cpu_fallback", severity="high" if n >= 10 else "medium",
                           title=f"CPU fallback: {op} ({n} calls)",
                           suggestion=f"`{base}` is not native on tpx and ran {n}x on the CPU"
                                      f"{' at ' + _where(site.file, site.line) if site else ''}: replace it: {hint}.",
                           file=site.file if site else None, line=site.line if site else None,
                           source=site.source if site else None, count=n))
    for g in report.graph_breaks:
        hint = next(h for key, h in GRAPH_BREAK_HINTS if key.lower() in g.reason.lower())
        first = g.reason.splitlines()[0][:160] if g.reason else "graph break"
        out.append(ProfileFinding(kind="graph_break", severity="medium", title=f"graph break: {first}",
                           suggestion=f"torch.compile splits the graph at {_where(g.file, g.line)}: {hint}.",
                           file=g.file, line=g.line, count=g.count))
    for r in report.recompiles:
        reason = " ".join(r.reason.split())[:240]
        out.append(ProfileFinding(kind="recompile", severity="medium", title="recompile",
                           suggestion=RECOMPILE_SUGGESTION.format(reason=reason), file=r.file, line=r.line,
                           count=r.count))
    rank = {"high": 0, "medium": 1, "low": 2}
    return sorted(out, key=lambda f: (rank[f.severity], -f.count))


def _read_doc(profile_dir: Path) -> ProfileDoc:
    try:
        data = load_json(profile_dir, PROFILE_JSON)
    except ArtifactMissing:
        raise ProfileError(f"{profile_dir} holds no {PROFILE_JSON}; run with --profile first (or the run died "
                           "before exit: the profile is written at interpreter exit; a run that left something "
                           "else under that name has it in its artifacts_refused)") from None
    except ArtifactRefused as exc:
        raise ProfileError(f"{profile_dir}: {PROFILE_JSON} was not read: {exc.reason}") from None
    except InvalidArtifact as exc:
        raise ProfileError(f"{profile_dir}: {exc}") from None
    try:
        return validate(ProfileDoc, data, PROFILE_JSON)
    except InvalidArtifact as exc:
        raise ProfileError(f"{profile_dir}: {exc}") from None


def build_profile_report(profile_dir: Path | str, repo_root: Path | str,
                         report_dir: Path | str | None = None) -> ProfileReport:
    """Read ``profile.json`` from ``profile_dir`` (through sandbox.artifacts: a run wrote it) and derive
    findings; writes ``profile.md`` into ``report_dir`` (default ``profile_dir``), a directory this
    user must own: the runner's host-owned copy of the run's profile dir, never the run's own."""
    profile_dir, root = Path(profile_dir), Path(repo_root)
    doc = _read_doc(profile_dir)
    window = doc.window
    steps = window.steps
    prof_rows = _profiler_rows(doc)
    rows = _tpx_rows(doc) or prof_rows  # device ops when the run used tpx, else what torch.profiler saw
    report = ProfileReport(profile_dir=str(profile_dir), repo_root=str(root), steps_profiled=steps,
                           window_wall_s=window.wall_s, device_work=device_work_of(doc))
    report.top_ops_by_time = sorted(rows, key=lambda r: -r.time_us)[:TOP_N]
    report.top_ops_by_count = sorted(rows, key=lambda r: -r.count)[:TOP_N]
    report.profiler_top_ops = sorted(prof_rows, key=lambda r: -r.time_us)[:TOP_N]
    tpx = doc.tpx
    tpx_ops = tpx.ops if tpx is not None else []
    fb_ops = {o.op: o.fallback_calls for o in tpx_ops if o.fallback_calls}
    first_count: dict[str, int] = {}
    for o in tpx_ops:
        first_count.setdefault(o.op, o.count)
    for name in (tpx.fallback_ops if tpx is not None else []):
        fb_ops.setdefault(name, first_count.get(name, 0))
    report.fallback_ops = fb_ops
    report.fallback_time_us = sum(o.time_s * 1e6 for o in tpx_ops if o.op in fb_ops)
    report.syncs = list(doc.syncs)
    report.d2h_syncs_total = int((tpx.d2h_syncs if tpx is not None else 0)
                                 or sum(s.count for s in report.syncs if s.category == "d2h_sync"))
    h2d_window = sum(s.window_count for s in report.syncs if s.category == "h2d_copy")
    if steps:
        window_copies = doc.tpx_window.h2d_copies if doc.tpx_window is not None else 0
        report.h2d_copies_per_step = max(h2d_window, int(window_copies or 0)) / steps
    report.graph_breaks, report.recompiles = _compile_events(doc, root)
    findings = _findings(report, steps)
    report.findings = findings[:MAX_FINDINGS]
    if len(findings) > MAX_FINDINGS:
        report.notes.append(f"{len(findings) - MAX_FINDINGS} more findings of lower rank are left out "
                            f"(the {MAX_FINDINGS} most urgent are listed)")
    if doc.trace:
        if is_regular_file(profile_dir, doc.trace):
            report.trace_path = str(profile_dir / doc.trace)
        else:
            report.notes.append(f"the profile names a trace file {doc.trace!r} that is not in {profile_dir} as a "
                                "regular file; no trace")
    if tpx is None or tpx == TpxStats():
        report.notes.append("no tpx op statistics (the run did not use tpx): op table from torch.profiler only")
    if window.start_step is None:
        report.notes.append(f"the program ran fewer steps ({doc.steps_seen}) than the warm-up; "
                            "no torch.profiler window was recorded")
    from tools.profile.render import render_markdown

    try:
        report.markdown_path = str(write_text(Path(report_dir) if report_dir else profile_dir, REPORT_MD,
                                              render_markdown(report)))
    except (ArtifactRefused, OSError) as exc:
        report.notes.append(f"{REPORT_MD} was not written: {exc}")
    return report


def device_work_of(doc: ProfileDoc) -> DeviceWork:
    """How much of a profiled run's work ran on tpx (``DeviceWork``), from its profile document."""
    run_tpx = sum(o.count for o in doc.tpx.ops) if doc.tpx is not None else 0
    ops = doc.device_ops
    if ops is None:
        return DeviceWork(run_tpx_ops=run_tpx)
    # From the first tpx op on: the set-up before it (a weight init, data made on the host before the
    # move) is not the program's work. Without a tpx op every op counts: all of the work stayed on CPU.
    total = ops.tpx + ops.other - (min(ops.before_tpx, ops.other) if ops.tpx else 0)
    compute = ops.compute_tpx + ops.compute_other
    return DeviceWork(tpx_ops=ops.tpx, total_ops=total, tpx_share=round(ops.tpx / total, 4) if total else None,
                      scope=doc.device_ops_scope, run_tpx_ops=run_tpx, compute_tpx_ops=ops.compute_tpx,
                      compute_ops=compute, compute_share=round(ops.compute_tpx / compute, 4) if compute else None)


def read_device_work(profile_dir: Path | str) -> DeviceWork:
    """``device_work_of`` the ``profile.json`` in ``profile_dir`` (a run wrote it: ``ProfileError``
    when it is missing, refused or not what Ferry writes)."""
    return device_work_of(_read_doc(Path(profile_dir)))
