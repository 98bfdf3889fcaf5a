"""Unsupported op in strict mode -> the documented CPU fallback, made explicit at the call site.

``x.nonzero()`` becomes ``x.cpu().nonzero().to(x.device)`` and ``torch.unique(x)`` becomes
``torch.unique(x.cpu()).to(x.device)``: the same result, computed on the host where tpx would have
fallen back anyway, without relying on the backend's implicit fallback.
"""

from __future__ import annotations

import ast
import json
import logging
from functools import lru_cache
from pathlib import Path

from agent.policy.base import Diagnosis, FixContext, Proposal, first_site_fix
from agent.policy import edits

logger = logging.getLogger(__name__)

RULE = "unsupported_op_cpu_fallback"
KINDS = ("unsupported_op",)


@lru_cache(maxsize=1)
def fallback_table() -> dict[str, dict]:
    data = json.loads((Path(__file__).with_name("op_fallbacks.json")).read_text())
    return {k: v for k, v in data.items() if not k.startswith("_")}


def op_short_name(op: str | None) -> str | None:
    if not op:
        return None
    name = op.split("::")[-1].split(".")[0]
    return name.rstrip("_") or None


def _fix(text: str, rel: str, lineno: int, op: str) -> str | None:
    tree = edits.parse(text, rel)
    if tree is None:
        return None
    spec = fallback_table()[op]
    for call in edits.calls_at(tree, lineno):
        func = call.func
        if not isinstance(func, ast.Attribute) or func.attr != op:
            continue
        base = edits.dotted_name(func.value)
        if base == "torch":  # torch.op(a, b, ...)
            if not call.args:
                return None
            n = min(spec["arg_count"], len(call.args))
            new = text
            first = edits.segment(text, call.args[0])
            # rewrite the innermost pieces from the end so earlier offsets stay valid
            new = edits.wrap_call(new, call, "(", f").to({first}.device)")
            tree2 = edits.parse(new, rel)
            if tree2 is None:
                return None
            call2 = next(c for c in edits.calls_at(tree2, lineno) if isinstance(c.func, ast.Attribute) and c.func.attr == op)
            for arg in reversed(call2.args[:n]):
                new = edits.wrap_call(new, arg, "", ".cpu()")
            return new
        # x.op(...): x.cpu().op(...).to(x.device)
        obj = edits.segment(text, func.value)
        if not obj:
            return None
        new = edits.wrap_call(text, call, "", f".to({obj}.device)")
        tree2 = edits.parse(new, rel)
        call2 = next(c for c in edits.calls_at(tree2, lineno) if isinstance(c.func, ast.Attribute) and c.func.attr == op)
        return edits.wrap_call(new, call2.func.value, "", ".cpu()")
    return None


def apply(diag: Diagnosis, ctx: FixContext) -> Proposal | None:
    op = op_short_name(diag.op)
    if diag.kind not in KINDS or op not in fallback_table():
        return None
    return first_site_fix(
        ctx, diag, rule=RULE, fix=lambda frame, text: _fix(text, frame.file, frame.line, op),
        reason=lambda site: f"tpx does not run {op} natively ({fallback_table()[op]['note']}); strict mode refused "
                            f"it at {site}: run it on the host explicitly and move the result back",
    )
