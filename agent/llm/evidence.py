"""What the model is shown when the migrated program runs but parity fails.

Built from the parity report (``tools.parity.models.ParityReport`` as JSON): the first divergent
module call or probe key, its metrics against the tolerances it was judged with, the likely
cause and its explanation, the module calls that fail after it, and the source where the
module is defined, constructed and called, when those can be found in the repository.
"""

from __future__ import annotations

import logging
import re
from typing import Any, Callable

logger = logging.getLogger(__name__)

TextOf = Callable[[str], "str | None"]
MAX_CLASS_LINES = 60
MAX_SITES = 4
SITE_CONTEXT = 2


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return "?" if value is None else str(value)


def _pct(frac: Any) -> str:
    return f"{frac * 100:.4g}%" if isinstance(frac, (int, float)) else "?"


def metrics_lines(output: dict[str, Any]) -> list[str]:
    """The failing tensor's metrics next to the tolerances of the check that judged it."""
    m, tol = output.get("metrics") or {}, output.get("tolerances") or {}
    where = (f"reference {output.get('ref_dtype')} {output.get('ref_shape')}, target {output.get('target_dtype')} "
             f"{output.get('target_shape')} on {output.get('target_device') or '?'}")
    lines = [f"Failing tensor {output.get('key')} ({where}): {output.get('verdict')} at the '{output.get('tier')}' check: "
             f"{output.get('reason')}"]
    if m:
        lines.append(f"  metrics: max_abs {_fmt(m.get('max_abs'))}, max_rel {_fmt(m.get('max_rel'))}, cosine "
                     f"{_fmt(m.get('cosine'))}, rmse {_fmt(m.get('rmse'))}, non-finite mismatches "
                     f"{m.get('nonfinite_mismatch', 0)}, elements off by more than the pass tolerance "
                     f"{_pct(m.get('frac_over_pass_rel'))}, error ratio vs fp32 golden {_fmt(m.get('error_ratio'))}")
    if tol:
        lines.append(f"  tolerances ({tol.get('dtype')}): pass if at most {_pct(tol.get('tier_pass_frac'))} of elements "
                     f"are off by more than {_pct(tol.get('tier_pass_rel'))} (warn: {_pct(tol.get('tier_warn_frac'))} by "
                     f"{_pct(tol.get('tier_warn_rel'))}); assert_close rtol {_fmt(tol.get('rtol'))} atol "
                     f"{_fmt(tol.get('atol'))}; cosine >= {_fmt(tol.get('cosine_min'))} with max_abs <= "
                     f"{_fmt(tol.get('cosine_max_abs'))}")
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


def source_snippets(div: dict[str, Any], files: list[str], text_of: TextOf) -> list[tuple[str, str]]:
    """(file, numbered snippet): the divergent module's class definition, where it is constructed and called."""
    texts = {}
    for rel in files:
        if rel.endswith(".py"):
            text = text_of(rel)
            if text is not None:
                texts[rel] = text.splitlines()
    out: list[tuple[str, str]] = []
    cls = div.get("module_class")
    if cls:
        rx = re.compile(rf"^\s*class\s+{re.escape(cls)}\b")
        for rel, lines in texts.items():
            for i, line in enumerate(lines, 1):
                if rx.match(line):
                    end = _class_block(lines, i)
                    out.append((rel, f"--- {rel}:{i}-{end}: definition of {cls} ---\n{_numbered(lines, i, end, {i})}"))
    module = str(div.get("module") or "")
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
                    what = "construction or call" if not module.startswith("scalar:") else "where it is computed or printed"
                    out.append((rel, f"--- {rel}:{i}: {what} of {name!r} ---\n{_numbered(lines, lo, hi, {i})}"))
                    sites += 1
    return out


def _failing_after(report: dict[str, Any], key: str | None, limit: int = 6) -> list[str]:
    rows = []
    for m in report.get("modules") or []:
        if m.get("output_verdict") == "fail" and m.get("key") != key:
            rows.append(f"{m.get('key')} ({m.get('module_class')}, step {m.get('step')}): inputs {m.get('input_verdict')}, "
                        f"max_abs {_fmt(m.get('max_abs'))}, cosine {_fmt(m.get('cosine'))}")
    return rows[:limit] + ([f"... and {len(rows) - limit} more"] if len(rows) > limit else [])


def parity_evidence(report: dict[str, Any], files: list[str], text_of: TextOf,
                    diff_of: Callable[[str], str] | None = None) -> str:
    """The parity failure, as text for the model; ``diff_of(file)`` is what the migration changed in
    a file (shown for the files holding the divergent module's source)."""
    counts = report.get("counts") or {}
    parts = [f"Parity report: {report.get('summary') or report.get('verdict')}",
             "Counts: " + ", ".join(f"{k} {v}" for k, v in counts.items())]
    div = report.get("first_divergence")
    if isinstance(div, dict):
        parts.append(
            f"First divergence: probe key {div.get('key')} = module {div.get('module')} (class "
            f"{div.get('module_class') or '?'}, call {div.get('call')}, step {div.get('step')}); its inputs "
            f"{div.get('inputs')}.\nLikely cause: {div.get('likely_cause')}: {div.get('explanation')}\n"
            f"Torch functions called in it on the target: {', '.join(div.get('ops') or []) or 'none recorded'}")
        if isinstance(div.get("output"), dict):
            parts.append("\n".join(metrics_lines(div["output"])))
        after = _failing_after(report, div.get("key"))
        if after:
            parts.append("Module calls failing after it (they may only inherit the drift):\n" + "\n".join(after))
        snippets = source_snippets(div, files, text_of)
        parts.append("\n\n".join(text for _, text in snippets) if snippets else
                     f"(the source of {div.get('module')} could not be located; use search_repo)")
        for rel in dict.fromkeys(rel for rel, _ in snippets):
            diff = diff_of(rel) if diff_of else ""
            if diff:
                parts.append(f"What the migration changed in {rel} (original -> current):\n{diff}")
    else:
        failing = [t for t in (report.get("tensors") or []) + (report.get("scalars") or []) if t.get("verdict") == "fail"]
        parts.append("No first divergence was localised." + (" Failing probe keys:" if failing else ""))
        for t in failing[:5]:
            parts.append("\n".join(metrics_lines(t)))
    if report.get("missing_in_target"):
        parts.append("Recorded in the reference only (the target took another path): "
                     + ", ".join(report["missing_in_target"][:10]))
    meta = report.get("target_meta") or {}
    tpx = meta.get("tpx") or {}
    if meta.get("final_matmul_precision") or tpx.get("matmul_precision"):
        parts.append(f"Target run: torch float32 matmul precision {meta.get('final_matmul_precision')!r}, "
                     f"tpx matmul precision {tpx.get('matmul_precision')!r}, CPU fallbacks "
                     f"{', '.join(tpx.get('fallback_ops') or []) or 'none'}")
    for note in (report.get("notes") or [])[:5]:
        parts.append(f"Note: {note}")
    return "\n\n".join(parts)
