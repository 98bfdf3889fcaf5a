"""Residual CUDA call at the failing line -> the catalogue codemod at that line.

First the auto codemods restricted to that file and line (kind ``codemod``: a catalogue edit);
if none applies, the scanner's proposed rewrite for a *review* finding on that line (e.g.
``.cuda(local_rank)`` -> ``.to(device)``), which is not automatic in the catalogue, so it is a
``policy`` edit (and asks for approval under --approve).
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path

from agent.migration import adapters
from agent.migration.records import EditKind
from agent.policy.base import Diagnosis, FixContext, PolicyRule, Proposal, make_proposal, new_text
from tools.codemods.fixes import ApiReplacement, Span, device_generic_api, replace_spans, source_lines, span_text
from tools.scan.models import RewriteResult

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
    how many sites it changed (FIX006 ``replace_spans`` makes the edit)."""
    report = adapters.scan(ctx.workspace / rel)  # type: ignore[operator]
    candidates = [f for f in report.findings
                  if f.rewrite and f.category != "unsupported" and f.rule_id not in ctx.skip_rules
                  and CUDA_AT_LINE.search(span_text(text, Span.of_finding(f)))]
    for trigger in (f for f in candidates if f.line == line):
        same = [f for f in candidates if f.rule_id == trigger.rule_id]
        for group in (same, [trigger]):  # all sites of the rule; the trigger alone if that does not work
            result = replace_spans(text, [(Span.of_finding(f), (f.rewrite or "").split("  #")[0].rstrip())
                                          for f in group], filename=rel)
            if result is not None and Span.of_finding(trigger) in result.sites:
                return result.source, len(result.sites)
    return None


@lru_cache(maxsize=1)
def residual_table() -> dict[str, ApiReplacement]:
    data = json.loads(Path(__file__).with_name("residual_cuda.json").read_text())
    return {k: ApiReplacement(replace=v["replace"], device_kw=bool(v["device_kw"]))
            for k, v in data.items() if not k.startswith("_")}


def _table_rewrite(ctx: FixContext, rel: str, line: int, text: str) -> str | None:
    """Replace the CUDA API called on ``line`` by its device-generic equivalent (residual_cuda.json).

    Every call of the same API in the file is replaced in the same edit: they would each fail the
    same way, one target run later (FIX005 ``device_generic_api``).
    """
    return new_text(device_generic_api(text, line, residual_table(), mode=ctx.device_mode, filename=rel))


def apply(diag: Diagnosis, ctx: FixContext) -> Proposal | None:
    if diag.kind not in KINDS or ctx.workspace is None:
        return None
    for frame, site, text in ctx.untried_sites(RULE, diag):
        lines = source_lines(text)
        if not 0 < frame.line <= len(lines):
            continue
        if diag.kind != "cuda_not_compiled" and not CUDA_AT_LINE.search(lines[frame.line - 1]):
            continue
        result = adapters.rewrite(ctx.workspace, device=ctx.device_mode, files=[frame.file],
                                 lines={frame.file: [frame.line]}, skip_rules=ctx.skip_rules)
        new = rewritten_texts(result,
                              str(ctx.workspace)).get(frame.file)
        kind: EditKind = "codemod"
        what = "the catalogue codemod at that line"
        if new is None:
            kind = "policy"
            reviewed = _review_rewrite(ctx, frame.file, frame.line, text)
            if reviewed is not None:
                new, n = reviewed
                what = "the rewrite proposed for this review finding" + (
                    f" (and for {n - 1} more like it in {frame.file}, which would fail the same way)" if n > 1 else "")
            else:
                new = _table_rewrite(ctx, frame.file, frame.line, text)
                what = "the device-generic equivalent of that CUDA call (every call of it in the file)"
        if new is None or new == text:
            continue
        return make_proposal(
            ctx, rule=RULE, kind=kind, site=site, new_files={frame.file: new},
            reason=f"CUDA call left at {site} ({diag.first_line or 'CUDA not available'}): applied {what}",
        )
    return None


class ResidualCudaCodemod(PolicyRule):
    ID = RULE
    KINDS = KINDS
    ORDER = 50
    DESCRIPTION = ("a CUDA call left at the failing line -> the catalogue codemod at that line, the scanner's "
                   "rewrite of a review finding there, or its device-generic equivalent (torch.cuda.Event -> "
                   "torch.Event)")
    apply = staticmethod(apply)
