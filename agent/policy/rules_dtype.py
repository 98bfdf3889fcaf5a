"""float64 on the device -> float32 at that site (tpx has no float64)."""

from __future__ import annotations

import ast
import logging
import re

from agent.policy.base import Diagnosis, FixContext, Frame, Proposal, first_site_fix
from agent.policy import edits

logger = logging.getLogger(__name__)

RULE = "float64_to_float32"
KINDS = ("tpx_float64",)
F64_TOKENS = re.compile(r"\btorch\.(float64|double)\b")
DOUBLE_CALL = re.compile(r"\.double\(\s*\)")
MOVE_METHODS = frozenset({"to", "cuda", "tpx"})


def _fix_line(text: str, rel: str, lineno: int) -> str | None:
    lines = edits.lines_of(text)
    if not 0 < lineno <= len(lines):
        return None
    line = lines[lineno - 1]
    # 1. explicit float64 dtypes / .double() at the site.
    new_line = F64_TOKENS.sub("torch.float32", line)
    new_line = DOUBLE_CALL.sub(".float()", new_line)
    if new_line != line:
        return edits.replace_line(text, lineno, new_line)
    # 2. a host float64 tensor moved to the device: cast it while moving.
    tree = edits.parse(text, rel)
    if tree is None:
        return None
    for call in edits.calls_at(tree, lineno):
        func = call.func
        if isinstance(func, ast.Attribute) and func.attr in MOVE_METHODS and call.lineno == lineno:
            if func.attr == "to" and not edits.has_kwarg(call, "dtype") and not any(
                "dtype" in edits.segment(text, a) or "float" in edits.segment(text, a) for a in call.args
            ):
                return edits.insert_kwarg(text, call, "dtype=torch.float32")
            if func.attr in ("cuda", "tpx"):
                return edits.wrap_call(text, call, "", ".float()")
    # 3. a factory / from_numpy at the site producing float64: cast the result.
    for call in edits.calls_at(tree, lineno):
        name = edits.dotted_name(call.func)
        if name in ("torch.from_numpy", "torch.tensor", "torch.as_tensor") and call.lineno == lineno:
            if name != "torch.from_numpy" and not edits.has_kwarg(call, "dtype"):
                return edits.insert_kwarg(text, call, "dtype=torch.float32")
            return edits.wrap_call(text, call, "", ".float()")
    return None


def _fix_site(frame: Frame, text: str) -> str | None:
    tree = edits.parse(text, frame.file)
    if tree is None or not edits.imports_torch_as_torch(tree):
        return None
    return _fix_line(text, frame.file, frame.line)


def apply(diag: Diagnosis, ctx: FixContext) -> Proposal | None:
    if diag.kind not in KINDS:
        return None
    return first_site_fix(  # the deepest user frame first
        ctx, diag, rule=RULE, fix=_fix_site,
        reason=lambda site: f"tpx has no float64: {diag.exc_type}: {diag.first_line} -> compute in float32 at {site}",
    )
