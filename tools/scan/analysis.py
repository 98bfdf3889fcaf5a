"""Per-file work, run in worker processes: load, pre-filter, parse (cached by content hash),
run the rules, optionally rewrite."""

from __future__ import annotations

import ast
import hashlib
import logging
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

import libcst as cst

from tools.codemods.engine import DefinedDevice, ModuleOutcome, OuterImports, RawFinding, analyze
from tools.codemods.prefilter import may_contain_idioms
from tools.codemods.registry import rule_by_id
from tools.scan.envfiles import RULE_ID as ENV_RULE_ID
from tools.scan.envfiles import env_file_kind, scan_text
from tools.scan.models import Device, FileNote, Finding
from tools.scan.sources import Unit, cell_source, dump_notebook, load, restore_magics, top_level_imports

logger = logging.getLogger(__name__)

_CACHE_SIZE = 512
# (source digest, rewrite, device, rules, lines, device variable defined earlier, names imported earlier):
# what an analysis depends on
_OutcomeKey = tuple[str, bool, str, tuple[str, ...] | None, tuple[int, ...] | None, DefinedDevice | None,
                    OuterImports]
_outcomes: OrderedDict[_OutcomeKey, ModuleOutcome] = OrderedDict()
_modules: OrderedDict[str, cst.Module] = OrderedDict()


@dataclass
class FileJob:
    root: str
    rel: str
    max_bytes: int
    rules: tuple[str, ...] | None = None
    rewrite: bool = False
    device: Device = "accelerator"
    lines: tuple[int, ...] | None = None


@dataclass
class FileOutcome:
    rel: str
    lines: int = 0
    findings: list[Finding] = field(default_factory=list)
    review: list[Finding] = field(default_factory=list)
    notes: list[FileNote] = field(default_factory=list)
    prefiltered: bool = False
    skipped: bool = False
    original: str | None = None
    rewritten: str | None = None
    applied: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def clear_caches() -> None:
    """Forget the parsed modules and analyses this process keeps (a benchmark's runs start cold)."""
    _outcomes.clear()
    _modules.clear()


def _parse(text: str, digest: str) -> cst.Module:
    module = _modules.get(digest)
    if module is None:
        module = cst.parse_module(text)
        _modules[digest] = module
        if len(_modules) > _CACHE_SIZE:
            _modules.popitem(last=False)
    else:
        _modules.move_to_end(digest)
    return module


def _analyze_cached(text: str, job: FileJob, defined_as: DefinedDevice | None = None,
                    outer_imports: OuterImports = ()) -> ModuleOutcome:
    digest = hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()
    key: _OutcomeKey = (digest, job.rewrite, job.device, job.rules, job.lines, defined_as, outer_imports)
    hit = _outcomes.get(key)
    if hit is not None:
        _outcomes.move_to_end(key)
        return hit
    outcome = analyze(text, device_mode=job.device,
                      rule_ids=set(job.rules) if job.rules else None,
                      lines=set(job.lines) if job.lines is not None else None,
                      rewrite=job.rewrite, module=_parse(text, digest), device_defined_as=defined_as,
                      outer_imports=outer_imports)
    _outcomes[key] = outcome
    if len(_outcomes) > _CACHE_SIZE:
        _outcomes.popitem(last=False)
    return outcome


def _finding(raw: RawFinding, rel: str, cell: int | None) -> Finding:
    rule = rule_by_id(raw.rule_id)
    return Finding(rule_id=raw.rule_id, rule_name=rule.NAME, file=rel, line=raw.line, col=raw.col,
                   end_line=raw.end_line, end_col=raw.end_col, cell=cell, snippet=raw.snippet,
                   category=raw.category, message=raw.message,
                   rewrite=raw.suggestion,
                   reason=None if raw.category == "auto" else raw.message,
                   blocks=list(raw.blocks))


def _env_file(job: FileJob, kind: str, text: str, out: FileOutcome) -> FileOutcome:
    """Shell/Docker/make/.env/YAML files: FRY017 findings only, never rewritten."""
    if job.rules is not None and ENV_RULE_ID not in job.rules:
        return out
    name = rule_by_id(ENV_RULE_ID).NAME
    for h in scan_text(text, kind):
        if job.lines is not None and h.line not in job.lines:
            continue
        finding = Finding(rule_id=ENV_RULE_ID, rule_name=name, file=job.rel, line=h.line, col=h.col,
                          end_line=h.line, end_col=h.end_col, snippet=h.snippet, category="review",
                          message=h.message, rewrite=h.equivalent, reason=h.message, blocks=list(h.blocks))
        out.findings.append(finding)
        if job.rewrite:
            out.review.append(finding)
    return out


def process(job: FileJob) -> FileOutcome:
    out = FileOutcome(rel=job.rel)
    loaded = load(Path(job.root) / job.rel, job.rel, job.max_bytes)
    if loaded.note is not None:
        out.notes.append(loaded.note)
        out.skipped = loaded.note.kind != "parse_error"
        return out
    assert loaded.raw_text is not None
    out.notes.extend(loaded.notes)
    out.lines = loaded.raw_text.count("\n") + 1
    if not job.rel.endswith((".py", ".ipynb")):
        kind = env_file_kind(Path(job.root), job.rel)
        if kind is not None:
            return _env_file(job, kind, loaded.raw_text, out)
    if not may_contain_idioms(loaded.raw_text):
        out.prefiltered = True
        for unit in loaded.units:  # still report files that do not parse (CPython's parser is cheap)
            try:
                ast.parse(unit.text)
            except SyntaxError as exc:
                where = f" (cell {unit.cell})" if unit.cell is not None else ""
                out.notes.append(FileNote(file=job.rel, kind="parse_error", line=exc.lineno,
                                          message=f"does not parse{where}: {exc.msg} at line {exc.lineno}"))
            except (ValueError, RecursionError) as exc:
                out.notes.append(FileNote(file=job.rel, kind="parse_error", message=f"does not parse: {exc}"))
        return out
    new_units: list[tuple[Unit, str]] = []
    defined_as: DefinedDevice | None = None  # notebooks: the device variable an earlier cell defines
    imported: dict[str, str] = {}  # notebooks: the names earlier cells import (the kernel keeps them)
    for unit in loaded.units:
        try:
            if unit.cell is None:
                outcome = _analyze_cached(unit.text, job)
            else:
                outcome = _analyze_cached(unit.text, job, defined_as, tuple(imported.items()))
        except cst.ParserSyntaxError as exc:
            where = f" (cell {unit.cell})" if unit.cell is not None else ""
            out.notes.append(FileNote(file=job.rel, kind="parse_error", line=exc.raw_line,
                                      message=f"does not parse{where}: {exc.message} at line {exc.raw_line}, "
                                              f"column {exc.raw_column + 1}"))
            continue
        except RecursionError:
            out.notes.append(FileNote(file=job.rel, kind="error", message="nesting too deep for the parser"))
            continue
        except Exception as exc:  # a bug in one rule must not stop the scan of the repository
            logger.exception("analysis of %s failed", job.rel)
            out.notes.append(FileNote(file=job.rel, kind="error",
                                      message=f"internal error while analysing ({type(exc).__name__}: {exc}); "
                                              "the file was left unchanged, please report it"))
            continue
        if unit.cell is not None:
            imported.update(top_level_imports(outcome.new_source))
        out.findings.extend(_finding(f, job.rel, unit.cell) for f in outcome.findings)
        if job.rewrite:
            out.review.extend(_finding(f, job.rel, unit.cell) for f in outcome.remaining)
            out.applied.extend(outcome.applied)
            out.warnings.extend(f"{job.rel}: {w}" for w in outcome.warnings)
            new_units.append((unit, outcome.new_source))
            defined_as = defined_as or outcome.device_variable
    if job.rewrite and new_units and any(u.text != new for u, new in new_units):
        out.original = loaded.raw_text
        if loaded.notebook is None:
            out.rewritten = new_units[0][1]
        else:
            nb = loaded.notebook
            for unit, new in new_units:
                if unit.text == new:
                    continue
                cell = nb["cells"][unit.cell]
                restored = restore_magics(cell_source(cell), unit.text, new, unit.cell_magic)
                cell["source"] = restored.splitlines(keepends=True)
            out.rewritten = dump_notebook(nb, loaded.raw_text)
        out.applied = sorted(set(out.applied))
    return out
