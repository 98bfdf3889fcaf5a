"""Residual CUDA call ("Torch not compiled with CUDA enabled") -> the catalogue codemod at that line."""

from __future__ import annotations

import logging
from typing import Any

from agent import toolbox
from agent.policy.base import Diagnosis, FixContext, Proposal, make_proposal

logger = logging.getLogger(__name__)

RULE = "residual_cuda_codemod"
KINDS = ("cuda_not_compiled",)


def rewritten_texts(result: dict[str, Any], root_prefix: str | None = None) -> dict[str, str]:
    """relative path -> rewritten text, for the files a RewriteResult changed."""
    out: dict[str, str] = {}
    for entry in result.get("files", []) or []:
        path = entry.get("path") or entry.get("file")
        new = entry.get("rewritten") if "rewritten" in entry else entry.get("new_text")
        old = entry.get("original") if "original" in entry else entry.get("old_text")
        if not path or new is None or new == old:
            continue
        if root_prefix and path.startswith(root_prefix):
            path = path[len(root_prefix):].lstrip("/")
        out[path] = new
    return out


def apply(diag: Diagnosis, ctx: FixContext) -> Proposal | None:
    if diag.kind not in KINDS or ctx.workspace is None:
        return None
    for frame in reversed(diag.frames):
        site = f"{frame.file}:{frame.line}"
        if f"{RULE}@{site}" in ctx.tried:
            continue
        result = toolbox.rewrite(ctx.workspace, device=ctx.device_mode, files=[frame.file], lines={frame.file: [frame.line]})
        new_files = rewritten_texts(result, str(ctx.workspace))
        new = new_files.get(frame.file)
        if new is None:
            continue
        return make_proposal(
            ctx, rule=RULE, kind="codemod", site=site, new_files={frame.file: new},
            reason=f"CUDA call left at {site} ({diag.message.splitlines()[0] if diag.message else 'CUDA not available'}): "
                   "applied the catalogue codemod at that line",
        )
    return None
