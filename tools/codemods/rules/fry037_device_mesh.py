"""FRY037 (dist.device-mesh): init_device_mesh("cuda", ...) -> init_device_mesh(device.type, ...)."""

from __future__ import annotations

import libcst as cst

from tools.codemods.base import CodemodRule
from tools.codemods.nodes import kwarg, positional
from tools.codemods.tables import DEVICE_MESH


class DeviceMesh(CodemodRule):
    ID = "FRY037"
    NAME = "dist.device-mesh"
    DESCRIPTION = 'init_device_mesh("cuda", ...) -> init_device_mesh(device.type, ...).'
    CATEGORY = "auto"
    ENTRIES = (37,)

    def visit_Call(self, node: cst.Call) -> None:
        if self.qname_in(node.func, DEVICE_MESH) is None:
            return
        pos = positional(node)
        self.cuda_device_type_arg(node, pos[0] if pos else kwarg(node, "device_type"), "device mesh pinned to CUDA")


RULE = DeviceMesh
