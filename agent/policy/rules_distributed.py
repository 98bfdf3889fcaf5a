"""A process group without a backend for the device -> name one per device at init_process_group.

``init_process_group(backend="gloo")`` (or the catalogue's CPU default) gives CPU tensors a
backend but not the accelerator's; DDP then fails with "No backend type associated with device
type tpx". The fix names both: ``cpu:gloo,<device>:<its default backend, else gloo>`` — nccl on
CUDA, gloo on tpx (whose memory is host memory) — so the code stays device-generic.
"""

from __future__ import annotations

import ast
import logging
import re

from agent.policy import edits
from agent.policy.base import Diagnosis, FixContext, Proposal, make_proposal

logger = logging.getLogger(__name__)

RULE = "per_device_process_group_backend"
KINDS = ("other",)
NO_BACKEND = re.compile(r"No backend type associated with device type (\w+)")


def _backend_expr(has_device: bool) -> str:
    dev = "device.type" if has_device else "torch.accelerator.current_accelerator().type"
    return (f'f"cpu:gloo,{{{dev}}}:{{torch.distributed.Backend.default_device_backend_map.get({dev}, \'gloo\')}}"')


def _fix(text: str, rel: str) -> tuple[str, int] | None:
    tree = edits.parse(text, rel)
    if tree is None or not edits.imports_torch_as_torch(tree):
        return None
    has_device = any(isinstance(t, ast.Name) and t.id == "device"
                     for n in tree.body if isinstance(n, ast.Assign) for t in n.targets)
    for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
        if not edits.dotted_name(call.func).endswith("init_process_group"):
            continue
        expr = _backend_expr(has_device)
        kw = next((k for k in call.keywords if k.arg == "backend"), None)
        if kw is not None:
            if "cpu:gloo," in edits.segment(text, kw.value):
                return None
            return edits.replace_node(text, kw.value, expr), call.lineno
        if call.args:
            return edits.replace_node(text, call.args[0], expr), call.lineno
        return edits.insert_kwarg(text, call, f"backend={expr}"), call.lineno
    return None


def apply(diag: Diagnosis, ctx: FixContext) -> Proposal | None:
    if diag.kind not in KINDS or not NO_BACKEND.search(diag.message or ""):
        return None
    # the init call is usually not on the failing line: look in the traced files first, then the rest
    order = [f.file for f in reversed(diag.frames)] + [f for f in ctx.known_files if f.endswith(".py")]
    seen: set[str] = set()
    for rel in order:
        if rel in seen:
            continue
        seen.add(rel)
        text = ctx.text(rel)
        if text is None or "init_process_group" not in text:
            continue
        fixed = _fix(text, rel)
        if fixed is None:
            continue
        new, line = fixed
        site = f"{rel}:{line}"
        if f"{RULE}@{site}" in ctx.tried or edits.parse(new, rel) is None:
            continue
        return make_proposal(
            ctx, rule=RULE, kind="policy", site=site, new_files={rel: new},
            reason=(f"{NO_BACKEND.search(diag.message).group(0)} at {diag.where()}: the process group has no "  # type: ignore[union-attr]
                    "backend for the accelerator; name one per device (cpu:gloo,<device>:<default or gloo>)"),
        )
    return None
