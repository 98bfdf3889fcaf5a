"""Residual CUDA call at the failing line -> the catalogue codemod at that line.

First the auto codemods restricted to that file and line (kind ``codemod``: a catalogue edit);
if none applies, the scanner's proposed rewrite for a *review* finding on that line (e.g.
``.cuda(local_rank)`` -> ``.to(device)``), which is not automatic in the catalogue, so it is a
``policy`` edit (and asks for approval under --approve).
"""

from __future__ import annotations

import ast
import json
import logging
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

from agent import toolbox
from agent.policy import edits
from agent.policy.base import Diagnosis, FixContext, Proposal, make_proposal
from tools.scan.models import Finding, RewriteResult

logger = logging.getLogger(__name__)

RULE = "residual_cuda_codemod"
KINDS = ("cuda_not_compiled", "other", "ATen_cuda", "aten_cuda", "cuda_unmappable")
CUDA_AT_LINE = re.compile(r"\.cuda\(|\btorch\.cuda\b|[\"']cuda(:\d+)?[\"']|\bnccl\b|\bcuda\.")


def rewritten_texts(result: RewriteResult, root_prefix: str | None = None) -> dict[str, str]:
    """relative path -> rewritten text, for the files a RewriteResult changed."""
    out: dict[str, str] = {}
    for entry in result.files:
        path = entry.file
        if entry.rewritten == entry.original:
            continue
        if root_prefix and path.startswith(root_prefix):
            path = path[len(root_prefix):].lstrip("/")
        out[path] = entry.rewritten
    return out


def _review_rewrite(ctx: FixContext, rel: str, line: int, text: str) -> tuple[str, int] | None:
    """Apply the scanner's proposed rewrite of a review finding that starts on ``line``, and of every
    other review finding of the same rule in the file whose span is a CUDA call too: on a device
    without CUDA they would each fail the same way, one target run later. Returns the new text and
    how many sites it changed."""
    report = toolbox.scan(ctx.workspace / rel)  # type: ignore[operator]
    lines = edits.lines_of(text)

    def span(f: Finding) -> tuple[int, int]:
        start = sum(len(x) for x in lines[: f.line - 1]) + f.col - 1
        end = sum(len(x) for x in lines[: f.end_line - 1]) + f.end_col - 1
        return start, end

    candidates = [f for f in report.findings
                  if f.rewrite and f.category != "unsupported" and CUDA_AT_LINE.search(text[slice(*span(f))])]
    for trigger in (f for f in candidates if f.line == line):
        same = [f for f in candidates if f.rule_id == trigger.rule_id]
        for group in (same, [trigger]):  # all sites of the rule; the trigger alone if that does not parse
            new, taken = text, []
            for f in sorted(group, key=span, reverse=True):  # last first: earlier offsets stay valid
                start, end = span(f)
                if any(start < t_end and t_start < end for t_start, t_end in taken):
                    continue  # overlaps a site already rewritten
                new = new[:start] + (f.rewrite or "").split("  #")[0].rstrip() + new[end:]
                taken.append((start, end))
            if edits.parse(new, rel) is not None:
                return new, len(taken)
    return None


@lru_cache(maxsize=1)
def residual_table() -> dict[str, dict[str, Any]]:
    data = json.loads(Path(__file__).with_name("residual_cuda.json").read_text())
    return {k: v for k, v in data.items() if not k.startswith("_")}


def _table_rewrite(rel: str, line: int, text: str) -> str | None:
    """Replace the CUDA API called on ``line`` by its device-generic equivalent (residual_cuda.json).

    Every call of the same API in the file is replaced in the same edit: they would each fail the
    same way, one target run later.
    """
    tree = edits.parse(text, rel)
    if tree is None or not edits.imports_torch_as_torch(tree):
        return None
    has_device = any(isinstance(t, ast.Name) and t.id == "device"
                     for n in tree.body if isinstance(n, ast.Assign) for t in n.targets)
    dev = "device" if has_device else "torch.accelerator.current_accelerator()"
    table = residual_table()
    name = next((edits.dotted_name(c.func) for c in edits.calls_at(tree, line)
                 if c.lineno == line and edits.dotted_name(c.func) in table), None)
    if name is None:
        return None
    spec = table[name]
    new = text
    while True:  # one call at a time, last first, re-parsing so positions stay exact
        t = edits.parse(new, rel)
        if t is None:
            return None
        calls = sorted((c for c in ast.walk(t) if isinstance(c, ast.Call) and edits.dotted_name(c.func) == name),
                       key=lambda c: (c.lineno, c.col_offset))
        if not calls:
            break
        call = calls[-1]
        if spec["device_kw"] and not edits.has_kwarg(call, "device"):
            new = edits.insert_kwarg(new, call, f"device={dev}")
            t = edits.parse(new, rel)
            if t is None:
                return None
            call = sorted((c for c in ast.walk(t) if isinstance(c, ast.Call) and edits.dotted_name(c.func) == name),
                          key=lambda c: (c.lineno, c.col_offset))[-1]
        new = edits.replace_node(new, call.func, spec["replace"])
    return new if edits.parse(new, rel) is not None else None


def apply(diag: Diagnosis, ctx: FixContext) -> Proposal | None:
    if diag.kind not in KINDS or ctx.workspace is None:
        return None
    for frame, site, text in ctx.untried_sites(RULE, diag):
        if not 0 < frame.line <= len(edits.lines_of(text)):
            continue
        if diag.kind != "cuda_not_compiled" and not CUDA_AT_LINE.search(edits.lines_of(text)[frame.line - 1]):
            continue
        result = toolbox.rewrite(ctx.workspace, device=ctx.device_mode, files=[frame.file], lines={frame.file: [frame.line]})
        new = rewritten_texts(result, str(ctx.workspace)).get(frame.file)
        kind, what = "codemod", "the catalogue codemod at that line"
        if new is None:
            kind = "policy"
            reviewed = _review_rewrite(ctx, frame.file, frame.line, text)
            if reviewed is not None:
                new, n = reviewed
                what = "the rewrite proposed for this review finding" + (
                    f" (and for {n - 1} more like it in {frame.file}, which would fail the same way)" if n > 1 else "")
            else:
                new = _table_rewrite(frame.file, frame.line, text)
                what = "the device-generic equivalent of that CUDA call (every call of it in the file)"
        if new is None or new == text:
            continue
        return make_proposal(
            ctx, rule=RULE, kind=kind, site=site, new_files={frame.file: new},
            reason=f"CUDA call left at {site} ({diag.first_line or 'CUDA not available'}): applied {what}",
        )
    return None
