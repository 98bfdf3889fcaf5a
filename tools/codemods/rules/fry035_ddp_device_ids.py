"""FRY035 (dist.ddp-device-ids): DistributedDataParallel(device_ids=[r], output_device=r) -> device-generic DDP."""

from __future__ import annotations

import libcst as cst

from tools.codemods.base import Rule
from tools.codemods.nodes import kwarg, positional, without_kwargs
from tools.codemods.tables import DDP


class DdpDeviceIds(Rule):
    ID = "FRY035"
    NAME = "dist.ddp-device-ids"
    DESCRIPTION = ("DistributedDataParallel(model, device_ids=[local_rank], output_device=local_rank) -> "
                   "DistributedDataParallel(model): DDP uses the module's device.")
    CATEGORY = "auto"
    ENTRIES = (35,)

    def visit_Call(self, node: cst.Call) -> None:
        if self.qname_in(node.func, DDP) is None:
            return
        if len(positional(node)) > 1:
            self.hit(node, "DDP with positional device_ids", category="review",
                     suggestion="DistributedDataParallel(model) (device taken from the module)")
            return
        if kwarg(node, "device_ids") is None and kwarg(node, "output_device") is None:
            return
        self.hit(node, "device_ids/output_device name CUDA ordinals", category="auto",
                 suggestion="DistributedDataParallel(model)",
                 transform=_without_device_ids)


def _without_device_ids(updated: cst.CSTNode) -> cst.CSTNode:
    assert isinstance(updated, cst.Call)
    return without_kwargs(updated, {"device_ids", "output_device"})


RULE = DdpDeviceIds
