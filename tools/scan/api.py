"""``scan(ScanRequest) -> ScanReport`` and ``rewrite(RewriteRequest) -> RewriteResult``.

Neither writes files: ``rewrite`` returns the original and rewritten text and a diff; the CLI
writes only with ``--write``. Files are processed in a process pool (all cores by default).
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from tools.codemods.registry import all_rules
from tools.repopath import repo_path_problem
from tools.scan.analysis import FileJob, FileOutcome, process
from tools.scan.diffs import unified_diff
from tools.scan.models import FileNote, FileRewrite, RewriteRequest, RewriteResult, ScanReport, ScanRequest, ScanSummary
from tools.scan.walker import discover, scannable

logger = logging.getLogger(__name__)

#: below this many files the pool's start-up costs more than it saves
_POOL_MIN_FILES = 16


class ScanInputError(ValueError):
    """The request names something that cannot be scanned (missing path, unknown rule...)."""


def _check_rules(rules: list[str] | None) -> tuple[str, ...] | None:
    if rules is None:
        return None
    known = {r.ID for r in all_rules()}
    unknown = sorted(set(rules) - known)
    if unknown:
        raise ScanInputError(f"unknown rule id(s) {', '.join(unknown)}; known: FRY001..FRY052")
    return tuple(sorted(set(rules)))


def _files(path: Path, respect_gitignore: bool) -> tuple[Path, list[str]]:
    path = path.expanduser()
    problem = repo_path_problem(path)
    if problem is not None:
        raise ScanInputError(problem)
    if not path.exists():
        raise ScanInputError(f"{path} does not exist")
    if path.is_file():
        if not scannable(path.parent, path.name):
            raise ScanInputError(f"{path} is not a .py or .ipynb file, nor a shell script, Dockerfile, Makefile, "
                                 ".env or YAML file")
        return path.parent.resolve(), [path.name]
    root = path.resolve()
    return root, discover(root, respect_gitignore)


def run_jobs(jobs: list[FileJob], workers: int | None) -> list[FileOutcome]:
    workers = workers or os.cpu_count() or 1
    if workers <= 1 or len(jobs) < _POOL_MIN_FILES:
        return [process(j) for j in jobs]
    chunk = max(1, len(jobs) // (workers * 8))
    with ProcessPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(process, jobs, chunksize=chunk))


def _notes(outcomes: Iterable[FileOutcome]) -> list[FileNote]:
    return [n for o in outcomes for n in o.notes]


def scan(req: ScanRequest) -> ScanReport:
    rules = _check_rules(req.rules)
    root, files = _files(req.path, req.respect_gitignore)
    jobs = [FileJob(str(root), rel, req.max_file_bytes, rules) for rel in files]
    outcomes = run_jobs(jobs, req.jobs)
    findings = [f for o in outcomes for f in o.findings]
    summary = ScanSummary(
        files_scanned=sum(1 for o in outcomes if not o.skipped),
        files_skipped=sum(1 for o in outcomes if o.skipped),
        files_prefiltered=sum(1 for o in outcomes if o.prefiltered),
        lines=sum(o.lines for o in outcomes),
        findings=len(findings),
        by_category=dict(sorted(Counter(f.category for f in findings).items())),
        by_rule=dict(sorted(Counter(f.rule_id for f in findings).items())),
    )
    logger.info("scanned %d files under %s: %d findings", summary.files_scanned, root, len(findings))
    return ScanReport(root=str(root), findings=findings, notes=_notes(outcomes), summary=summary)


def rewrite(req: RewriteRequest) -> RewriteResult:
    rules = _check_rules(req.rules)
    root, files = _files(req.path, req.respect_gitignore)
    if req.files is not None:
        wanted = {Path(f).as_posix().lstrip("./") if not f.startswith("../") else f for f in req.files}
        missing = sorted(w for w in wanted if not (root / w).is_file())
        if missing:
            raise ScanInputError(f"not found under {root}: {', '.join(missing)}")
        files = sorted(wanted)
    lines = req.lines or {}
    jobs = [FileJob(str(root), rel, req.max_file_bytes, rules, rewrite=True, device=req.device,
                    lines=tuple(sorted(lines[rel])) if rel in lines else None)
            for rel in files if req.lines is None or rel in lines]
    outcomes = run_jobs(jobs, req.jobs)
    changed: list[FileRewrite] = []
    for o in outcomes:
        if o.rewritten is not None and o.original is not None and o.rewritten != o.original:
            changed.append(FileRewrite(file=o.rel, original=o.original, rewritten=o.rewritten,
                                       applied_rules=o.applied, diff=unified_diff(o.rel, o.original, o.rewritten)))
    return RewriteResult(
        root=str(root), device=req.device, files=changed,
        applied_rules=sorted({r for f in changed for r in f.applied_rules}),
        review=[f for o in outcomes for f in o.review],
        warnings=[w for o in outcomes for w in o.warnings],
        notes=_notes(outcomes),
        diff="".join(f.diff for f in changed),
    )
