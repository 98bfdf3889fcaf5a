"""The findings a check run shows at their lines: the scan's review findings no rule fixed (warnings)
and the profile's findings that name a source line (notices), with repository-relative paths. The
lines are the pushed head's: the profile ran the migrated code, and the head is scanned again (the
plan's review items, at the base's lines, serve only where no head was made).

A finding whose file cannot be written relative to the repository (a library's file, a path of
another machine) is left out: an annotation must name a file of the repository.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from agent.migration.facade import StateView
from agent.prbot.pr.models import Finding
from agent.prbot.pr.public import public_text
from tools.scan.models import ScanReport


def repo_path(file: str, directory: str = "") -> str | None:
    """``file`` (relative to the migrated directory, or a run's path of it) relative to the repository's
    root; None when it is not a file of the repository."""
    if file.startswith("/"):  # a run's path: public_text writes it relative to the repository
        rel = public_text(file, directory)
        if rel.startswith("/"):
            return None
    else:
        prefix = directory.strip("/")
        rel = f"{prefix}/{file}" if prefix else file
    p = PurePosixPath(rel)
    return None if not p.parts or ".." in p.parts else p.as_posix()


def findings_of(state: StateView, directory: str = "", head_scan: ScanReport | None = None) -> list[Finding]:
    """The review findings, then the profile findings with a line. ``head_scan``: the scan of the
    migrated head, whose review and unsupported findings are at the head's lines (the plan's review
    items are at the base's: used when no head was made)."""
    if head_scan is not None:
        out = scan_findings(head_scan, directory)
    else:
        plan = state.plan
        out = _warnings([(i.rule, i.file, i.line, i.category, i.message)
                         for i in (plan.ordered_review(state.scan) if plan else [])], directory)
    profile = state.profile
    for f in (profile.findings if profile is not None else []):
        path = repo_path(f.file, directory) if f.file else None
        if path is not None and f.line:
            out.append(Finding(path=path, line=f.line, level="notice", title=f"profile: {f.title}",
                               message=public_text(f.suggestion, directory)))
    return out


def scan_findings(head_scan: ScanReport, directory: str = "") -> list[Finding]:
    """A head's scan as warnings at its lines: its review and unsupported findings (what no rule fixes)."""
    return _warnings([(f.rule_id, f.file, f.line, f.category, f.message) for f in head_scan.findings
                      if f.category in ("review", "unsupported") and f.cell is None], directory)


def _warnings(review: list[tuple[str, str, int, str, str]], directory: str) -> list[Finding]:
    out: list[Finding] = []
    for rule, file, line, category, message in review:
        path = repo_path(file, directory)
        if path is not None and line >= 1:
            out.append(Finding(path=path, line=line, level="warning", title=f"{rule} ({category})",
                               message=public_text(message, directory)))
    return out
