"""FRY034 (dist.barrier-device-ids): dist.barrier(device_ids=[...]) -> dist.barrier()."""

from __future__ import annotations

import libcst as cst

from tools.codemods.base import CodemodRule
from tools.codemods.nodes import kwarg, without_kwargs
from tools.codemods.tables import BARRIER


class BarrierDeviceIds(CodemodRule):
    ID = "FRY034"
    NAME = "dist.barrier-device-ids"
    DESCRIPTION = "dist.barrier(device_ids=[...]) (NCCL-only argument) -> plain dist.barrier()."
    CATEGORY = "auto"
    ENTRIES = (34,)

    def visit_Call(self, node: cst.Call) -> None:
        if self.qname_in(node.func, BARRIER) is None or kwarg(node, "device_ids") is None:
            return
        self.hit(node, "barrier(device_ids=...) is only valid with NCCL", category="auto",
                 suggestion="dist.barrier()", transform=_without_device_ids)


def _without_device_ids(updated: cst.CSTNode) -> cst.CSTNode:
    assert isinstance(updated, cst.Call)
    return without_kwargs(updated, {"device_ids"})


RULE = BarrierDeviceIds
