"""FRY035 (dist.ddp-device-ids): DistributedDataParallel(device_ids=[r], output_device=r) -> device-generic DDP.

The positional forms (``DDP(model, device_ids)``, ``DDP(model, [rank], rank)``) lose their second and third
arguments the same way; a fourth positional argument (``dim``) would shift, so that call stays for review.
"""

from __future__ import annotations

import libcst as cst

from tools.codemods.base import CodemodRule
from tools.codemods.nodes import kwarg, positional, without_arg, without_kwargs
from tools.codemods.tables import DDP


class DdpDeviceIds(CodemodRule):
    ID = "FRY035"
    NAME = "dist.ddp-device-ids"
    DESCRIPTION = ("DistributedDataParallel(model, device_ids=[local_rank], output_device=local_rank) -> "
                   "DistributedDataParallel(model): DDP uses the module's device.")
    CATEGORY = "auto"
    ENTRIES = (35,)

    def visit_Call(self, node: cst.Call) -> None:
        if self.qname_in(node.func, DDP) is None:
            return
        pos = positional(node)
        if len(pos) > 3 or (len(pos) > 1 and pos[1] is not node.args[1]):
            self.hit(node, "DDP with positional device_ids and further positional arguments", category="review",
                     suggestion="DistributedDataParallel(model) (device taken from the module)")
            return
        if len(pos) > 1:
            count = len(pos) - 1
            self.hit(node, "positional device_ids/output_device name CUDA ordinals", category="auto",
                     suggestion="DistributedDataParallel(model)",
                     transform=lambda updated: _without_positional(updated, count))
            return
        if kwarg(node, "device_ids") is None and kwarg(node, "output_device") is None:
            return
        self.hit(node, "device_ids/output_device name CUDA ordinals", category="auto",
                 suggestion="DistributedDataParallel(model)",
                 transform=_without_device_ids)


def _without_device_ids(updated: cst.CSTNode) -> cst.CSTNode:
    assert isinstance(updated, cst.Call)
    return without_kwargs(updated, {"device_ids", "output_device"})


def _without_positional(updated: cst.CSTNode, count: int) -> cst.CSTNode:
    """``updated`` without its positional arguments 2 .. 1 + ``count`` (and any device keywords)."""
    assert isinstance(updated, cst.Call)
    call = without_kwargs(updated, {"device_ids", "output_device"})
    for _ in range(count):
        call = without_arg(call, 1)
    return call


RULE = DdpDeviceIds
