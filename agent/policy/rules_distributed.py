"""A process group without a backend for the device -> name one per device at init_process_group.

``init_process_group(backend="gloo")`` (or the catalogue's CPU default) gives CPU tensors a
backend but not the accelerator's; DDP then fails with "No backend type associated with device
type tpx". The fix names both: ``cpu:gloo,<device>:<its default backend, else gloo>`` — nccl on
CUDA, gloo on tpx (whose memory is host memory) — so the code stays device-generic. The edit is
:mod:`tools.codemods.fixes` FIX004 (``per_device_backend``).
"""

from __future__ import annotations

import re

from agent.policy.base import Diagnosis, FixContext, PolicyRule, Proposal, make_proposal
from tools.codemods.fixes import per_device_backend

RULE = "per_device_process_group_backend"
KINDS = ("other",)
NO_BACKEND = re.compile(r"No backend type associated with device type (\w+)")


def apply(diag: Diagnosis, ctx: FixContext) -> Proposal | None:
    found = NO_BACKEND.search(diag.message or "")
    if diag.kind not in KINDS or found is None:
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
        fixed = per_device_backend(text, mode=ctx.device_mode, filename=rel)
        if fixed is None or not fixed.changed:
            continue
        site = f"{rel}:{fixed.line}"
        if f"{RULE}@{site}" in ctx.tried:
            continue
        return make_proposal(
            ctx, rule=RULE, kind="policy", site=site, new_files={rel: fixed.source},
            reason=(f"{found.group(0)} at {diag.where()}: the process group has no "
                    "backend for the accelerator; name one per device (cpu:gloo,<device>:<default or gloo>)"),
        )
    return None


class PerDeviceProcessGroupBackend(PolicyRule):
    ID = RULE
    KINDS = KINDS
    ORDER = 40
    DESCRIPTION = ("init_process_group without a backend for the device -> a per-device backend "
                   "(cpu:gloo plus the device's own)")
    apply = staticmethod(apply)
