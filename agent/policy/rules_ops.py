"""Unsupported op in strict mode -> the documented CPU fallback, made explicit at the call site.

``x.nonzero()`` becomes ``x.cpu().nonzero().to(x.device)`` and ``torch.unique(x)`` becomes
``torch.unique(x.cpu()).to(x.device)``: the same result, computed on the host where tpx would have
fallen back anyway, without relying on the backend's implicit fallback. The edit is
:mod:`tools.codemods.fixes` FIX003 (``host_fallback``); the ops and how many of their leading
arguments go to the host are ``op_fallbacks.json``.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from agent.policy.base import Diagnosis, FixContext, PolicyRule, Proposal, first_site_fix, new_text
from tools.codemods.fixes import host_fallback

RULE = "unsupported_op_cpu_fallback"
KINDS = ("unsupported_op",)


@lru_cache(maxsize=1)
def fallback_table() -> dict[str, dict[str, Any]]:
    data = json.loads((Path(__file__).with_name("op_fallbacks.json")).read_text())
    return {k: v for k, v in data.items() if not k.startswith("_")}


def op_short_name(op: str | None) -> str | None:
    if not op:
        return None
    name = op.split("::")[-1].split(".")[0]
    return name.rstrip("_") or None


def apply(diag: Diagnosis, ctx: FixContext) -> Proposal | None:
    op = op_short_name(diag.op)
    if diag.kind not in KINDS or op not in fallback_table():
        return None
    spec = fallback_table()[op]
    return first_site_fix(
        ctx, diag, rule=RULE,
        fix=lambda frame, text: new_text(host_fallback(text, frame.line, op, arg_count=int(spec["arg_count"]),
                                                       filename=frame.file)),
        reason=lambda site: f"tpx does not run {op} natively ({spec['note']}); strict mode refused "
                            f"it at {site}: run it on the host explicitly and move the result back",
    )


class UnsupportedOpCpuFallback(PolicyRule):
    ID = RULE
    KINDS = KINDS
    ORDER = 70
    DESCRIPTION = ("an op tpx does not support (strict mode) -> the documented CPU fallback made explicit")
    apply = staticmethod(apply)
