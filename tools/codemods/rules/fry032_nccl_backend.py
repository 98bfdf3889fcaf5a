"""FRY032 (dist.nccl-backend): init_process_group("nccl") / backend="nccl" -> PyTorch's per-device default backend."""

from __future__ import annotations

import libcst as cst

from tools.codemods.base import Rule
from tools.codemods.nodes import kwarg, positional, string_value, without_arg, without_kwargs
from tools.codemods.tables import INIT_PROCESS_GROUP, NEW_GROUP


class NcclBackend(Rule):
    ID = "FRY032"
    NAME = "dist.nccl-backend"
    DESCRIPTION = ('init_process_group("nccl") / backend="nccl" (also new_group) -> no backend argument, so PyTorch '
                   "picks the backend registered for each device type (gloo on CPU, the device's CCL otherwise).")
    CATEGORY = "auto"
    ENTRIES = (32,)

    def visit_Call(self, node: cst.Call) -> None:
        if self.qname_in(node.func, INIT_PROCESS_GROUP | NEW_GROUP) is None:
            return
        is_init = self.qname_in(node.func, INIT_PROCESS_GROUP) is not None
        arg = kwarg(node, "backend")
        pos = positional(node)
        if arg is None and is_init and pos:
            arg = pos[0]
        if arg is None or string_value(arg.value) is None or "nccl" not in (string_value(arg.value) or ""):
            return
        if string_value(arg.value) != "nccl" or (arg.keyword is None and len(pos) > 1):
            self.hit(arg.value, "NCCL named in a backend spec Ferry cannot rewrite", category="review",
                     suggestion='omit backend (per-device defaults) or "cpu:gloo,<device>:<ccl>"')
            return
        index = list(node.args).index(arg)
        keyword = arg.keyword is not None

        def transform(updated: cst.CSTNode) -> cst.CSTNode:
            assert isinstance(updated, cst.Call)
            return without_kwargs(updated, {"backend"}) if keyword else without_arg(updated, index)

        self.hit(node, "NCCL runs on NVIDIA GPUs only", category="auto", transform=transform,
                 suggestion="omit backend: PyTorch maps each device type to its default backend")


RULE = NcclBackend
