"""What the model is shown when the migrated program runs but parity fails, or its tests fail.

Built from the parity report (``tools.parity.models.ParityReport``): the parity table (module
calls in execution order up to a few after the first divergence, with their verdicts and
metrics), the first divergent module call or probe key, its inputs' and outputs' metrics against
the tolerances they were judged with, the attributed cause and its explanation, the module calls
that fail after it, and the source where the module is defined, constructed and called, when
those can be found in the repository. For a test failure: the failing tests as the junit XML
reports them (``test_evidence``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from tools.parity.models import Divergence, ParityReport, TensorComparison
from tools.trace.models import TestOutcome

TextOf = Callable[[str], "str | None"]
MAX_CLASS_LINES = 60
MAX_SITES = 4
SITE_CONTEXT = 2
TABLE_AFTER = 4  # parity table rows shown after the first divergent call
TABLE_ROWS = 16
MAX_TESTS = 8


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return "?" if value is None else str(value)


def _pct(frac: Any) -> str:
    return f"{frac * 100:.4g}%" if isinstance(frac, (int, float)) else "?"


def metrics_lines(output: TensorComparison) -> list[str]:
    """The failing tensor's metrics next to the tolerances of the check that judged it."""
    m, tol = output.metrics, output.tolerances
    where = (f"reference {output.ref_dtype} {output.ref_shape}, target {output.target_dtype} "
             f"{output.target_shape} on {output.target_device or '?'}")
    lines = [f"Failing tensor {output.key} ({where}): {output.verdict} at the '{output.tier}' check: {output.reason}"]
    if m is not None:
        lines.append(f"  metrics: max_abs {_fmt(m.max_abs)}, max_rel {_fmt(m.max_rel)}, cosine {_fmt(m.cosine)}, "
                     f"rmse {_fmt(m.rmse)}, non-finite mismatches {m.nonfinite_mismatch}, elements off by more "
                     f"than the pass tolerance {_pct(m.frac_over_pass_rel)}, error ratio vs fp32 golden "
                     f"{_fmt(m.error_ratio)}")
    if tol is not None:
        lines.append(f"  tolerances ({tol.dtype}): pass if at most {_pct(tol.tier_pass_frac)} of elements "
                     f"are off by more than {_pct(tol.tier_pass_rel)} (warn: {_pct(tol.tier_warn_frac)} by "
                     f"{_pct(tol.tier_warn_rel)}); assert_close rtol {_fmt(tol.rtol)} atol {_fmt(tol.atol)}; "
                     f"cosine >= {_fmt(tol.cosine_min)} with max_abs <= {_fmt(tol.cosine_max_abs)}")
    return lines


def _numbered(lines: list[str], lo: int, hi: int, mark: set[int]) -> str:
    return "\n".join(f"{'>' if i in mark else ' '}{i}: {lines[i - 1]}" for i in range(lo, hi + 1))


def _class_block(lines: list[str], start: int) -> int:
    """The last line (1-based) of the class whose ``class`` statement is on line ``start``."""
    indent = len(lines[start - 1]) - len(lines[start - 1].lstrip())
    end = start
    for i in range(start + 1, len(lines) + 1):
        text = lines[i - 1]
        if text.strip() and len(text) - len(text.lstrip()) <= indent and not text.lstrip().startswith(("#", ")")):
            break
        if text.strip():
            end = i
    return min(end, start + MAX_CLASS_LINES - 1)


def attribute_name(module: str) -> str | None:
    """The attribute a module path ends in ('Net.blocks.0.norm' -> 'norm', 'Net.layers.3' -> 'layers')."""
    parts = [p for p in module.split(".")[1:] if p and not p.isdigit()]
    if parts:
        return parts[-1]
    return None


def source_snippets(div: Divergence, files: list[str], text_of: TextOf) -> list[tuple[str, str]]:
    """(file, numbered snippet): the divergent module's class definition, where it is constructed and called."""
    texts = {}
    for rel in files:
        if rel.endswith(".py"):
            text = text_of(rel)
            if text is not None:
                texts[rel] = text.splitlines()
    out: list[tuple[str, str]] = []
    cls = div.module_class
    if cls:
        rx = re.compile(rf"^\s*class\s+{re.escape(cls)}\b")
        for rel, lines in texts.items():
            for i, line in enumerate(lines, 1):
                if rx.match(line):
                    end = _class_block(lines, i)
                    out.append((rel, f"--- {rel}:{i}-{end}: definition of {cls} ---\n{_numbered(lines, i, end, {i})}"))
    module = div.module
    name = attribute_name(module) if not module.startswith("scalar:") else module.split(":", 1)[1]
    if name:
        pattern = (rf"\bself\.{re.escape(name)}\b" if not module.startswith("scalar:") else rf"\b{re.escape(name)}\b")
        rx = re.compile(pattern)
        sites = 0
        for rel, lines in texts.items():
            for i, line in enumerate(lines, 1):
                if sites >= MAX_SITES:
                    break
                if rx.search(line) and not line.lstrip().startswith("#"):
                    lo, hi = max(1, i - SITE_CONTEXT), min(len(lines), i + SITE_CONTEXT)
                    scalar = module.startswith("scalar:")
                    what = "where it is computed or printed" if scalar else "construction or call"
                    out.append((rel, f"--- {rel}:{i}: {what} of {name!r} ---\n{_numbered(lines, lo, hi, {i})}"))
                    sites += 1
    return out


def parity_table(report: ParityReport, key: str | None) -> str:
    """The module calls in execution order, up to ``TABLE_AFTER`` after ``key`` (the first divergence),
    at most ``TABLE_ROWS`` rows ending there; the divergent call is marked ``>``."""
    mods = report.modules
    at = next((i for i, m in enumerate(mods) if m.key == key), None)
    end = len(mods) if at is None else min(len(mods), at + 1 + TABLE_AFTER)
    start = max(0, end - TABLE_ROWS)
    if at is not None:
        start = min(start, at)
    rows = [f"{'>' if m.key == key else ' '} {m.order} {m.key} ({m.module_class or '?'}, step {_fmt(m.step)}): "
            f"inputs {m.input_verdict}, outputs {m.output_verdict}, max_abs {_fmt(m.max_abs)}, "
            f"max_rel {_fmt(m.max_rel)}, cosine {_fmt(m.cosine)}" for m in mods[start:end]]
    skipped = f", calls {start}-{end - 1} of {len(mods)}" if start or end < len(mods) else ""
    return f"Parity table (module calls in execution order{skipped}):\n" + "\n".join(rows) if rows else ""


def input_comparisons(report: ParityReport, div: Divergence) -> list[TensorComparison]:
    """The divergent module call's input tensors as compared (kind ``module_input``)."""
    return [t for t in report.tensors if t.kind == "module_input" and t.module == div.module and t.call == div.call]


def inputs_lines(report: ParityReport, div: Divergence) -> list[str]:
    """Each input tensor of the divergent call with its metrics (they pass: the drift is born inside)."""
    lines: list[str] = []
    for t in input_comparisons(report, div)[:6]:
        m = t.metrics
        figures = (f"max_abs {_fmt(m.max_abs)}, max_rel {_fmt(m.max_rel)}, cosine {_fmt(m.cosine)}, "
                   f"elements off by more than the pass tolerance {_pct(m.frac_over_pass_rel)}"
                   if m is not None else "no metrics")
        lines.append(f"Input tensor {t.key} ({t.ref_dtype} {t.ref_shape} -> {t.target_dtype} on "
                     f"{t.target_device or '?'}): {t.verdict} at the '{t.tier}' check; {figures}")
    return lines or [f"(no input tensor of {div.key} was recorded: inputs verdict {div.inputs})"]


def test_evidence(tests: list[TestOutcome], limit: int = MAX_TESTS) -> str:
    """The failing tests of a test run as its junit XML reports them (node id, outcome, where, message)."""
    bad = [t for t in tests if t.outcome in ("failed", "error")]
    if not bad:
        return ""
    rows = [f"- {t.nodeid}: {t.outcome}" + (f" at {t.file}:{t.line}" if t.file else "")
            + (f"\n  {(t.message or '').strip()[:800]}" if t.message else "") for t in bad[:limit]]
    more = f"\n... and {len(bad) - limit} more" if len(bad) > limit else ""
    passed = sum(1 for t in tests if t.outcome == "passed")
    return (f"Failing tests (junit: {len(bad)} failed, {passed} passed of {len(tests)}):\n"
            + "\n".join(rows) + more)


def _failing_after(report: ParityReport, key: str | None, limit: int = 6) -> list[str]:
    rows = [f"{m.key} ({m.module_class}, step {m.step}): inputs {m.input_verdict}, max_abs {_fmt(m.max_abs)}, "
            f"cosine {_fmt(m.cosine)}" for m in report.modules if m.output_verdict == "fail" and m.key != key]
    return rows[:limit] + ([f"... and {len(rows) - limit} more"] if len(rows) > limit else [])


def parity_evidence(report: ParityReport, files: list[str], text_of: TextOf,
                    diff_of: Callable[[str], str] | None = None) -> str:
    """The parity failure, as text for the model; ``diff_of(file)`` is what the migration changed in
    a file (shown for the files holding the divergent module's source)."""
    parts = [f"Parity report: {report.summary or report.verdict}",
             "Counts: " + ", ".join(f"{k} {v}" for k, v in report.counts.items())]
    div = report.first_divergence
    if div is not None:
        parts.append(
            f"First divergence: probe key {div.key} = module {div.module} (class {div.module_class or '?'}, call "
            f"{div.call}, step {div.step}); its inputs {div.inputs}.\nLikely cause: {div.likely_cause}: "
            f"{div.explanation}\nTorch functions called in it on the target: {', '.join(div.ops) or 'none recorded'}")
        table = parity_table(report, div.key)
        if table:
            parts.append(table)
        parts.append("Inputs of the divergent call:\n" + "\n".join(inputs_lines(report, div)))
        parts.append("Output of the divergent call:\n" + "\n".join(metrics_lines(div.output)))
        after = _failing_after(report, div.key)
        if after:
            parts.append("Module calls failing after it (they may only inherit the drift):\n" + "\n".join(after))
        snippets = source_snippets(div, files, text_of)
        parts.append("\n\n".join(text for _, text in snippets) if snippets else
                     f"(the source of {div.module} could not be located; use search_repo)")
        for rel in dict.fromkeys(rel for rel, _ in snippets):
            diff = diff_of(rel) if diff_of else ""
            if diff:
                parts.append(f"What the migration changed in {rel} (original -> current):\n{diff}")
    else:
        failing = [t for t in report.rows() if t.verdict == "fail"]
        table = parity_table(report, None)
        if table:
            parts.append(table)
        parts.append("No first divergence was localised." + (" Failing probe keys:" if failing else ""))
        for t in failing[:5]:
            parts.append("\n".join(metrics_lines(t)))
    if report.missing_in_target:
        parts.append("Recorded in the reference only (the target took another path): "
                     + ", ".join(report.missing_in_target[:10]))
    meta = report.target_meta
    tpx = meta.get("tpx") or {}
    if meta.get("final_matmul_precision") or tpx.get("matmul_precision"):
        parts.append(f"Target run: torch float32 matmul precision {meta.get('final_matmul_precision')!r}, "
                     f"tpx matmul precision {tpx.get('matmul_precision')!r}, CPU fallbacks "
                     f"{', '.join(tpx.get('fallback_ops') or []) or 'none'}")
    for note in report.notes[:5]:
        parts.append(f"Note: {note}")
    return "\n\n".join(parts)
