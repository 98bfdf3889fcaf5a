"""FRY032 (dist.nccl-backend): init_process_group("nccl") / backend="nccl" -> PyTorch's per-device default backend."""

from __future__ import annotations

import libcst as cst

from tools.codemods.base import Rule
from tools.codemods.nodes import expr, kwarg, positional, string_value
from tools.codemods.tables import INIT_PROCESS_GROUP, NEW_GROUP

_GROUP_CALLS = INIT_PROCESS_GROUP | NEW_GROUP


class NcclBackend(Rule):
    ID = "FRY032"
    NAME = "dist.nccl-backend"
    DESCRIPTION = ('init_process_group("nccl") / backend="nccl" (also new_group) -> the backend PyTorch maps to the '
                   "device type (torch.distributed.Backend.default_device_backend_map: nccl on CUDA, gloo on CPU, "
                   "the device's own collective library where one is registered, gloo otherwise).")
    CATEGORY = "auto"
    ENTRIES = (32,)

    def visit_Call(self, node: cst.Call) -> None:
        if self.qname_in(node.func, _GROUP_CALLS) is None:
            return
        is_init = self.qname_in(node.func, INIT_PROCESS_GROUP) is not None
        arg = kwarg(node, "backend")
        pos = positional(node)
        if arg is None and is_init and pos:
            arg = pos[0]
        value = string_value(arg.value) if arg is not None else None
        if arg is None or value is None or "nccl" not in value:
            return
        if value != "nccl":
            self.hit(arg.value, "NCCL named in a backend spec Ferry cannot rewrite", category="review",
                     suggestion='"cpu:gloo,<device>:<ccl>" for the target device')
            return
        torch = self.ctx.torch_name or "torch"
        replacement = (f"{torch}.distributed.Backend.default_device_backend_map.get("
                       f"{self.device_type(arg.value)}, \"gloo\")")
        self.hit(arg.value, "NCCL runs on NVIDIA GPUs only", category="auto", suggestion=replacement,
                 transform=lambda updated: expr(replacement), needs_device=True)


RULE = NcclBackend
