"""FRY008 (placement.device-selection): "cuda" if torch.cuda.is_available() else "cpu" ->
accelerator-aware selection."""

from __future__ import annotations

import libcst as cst

from tools.codemods.base import CodemodRule
from tools.codemods.nodes import cuda_device_string, dotted, expr, string_value
from tools.codemods.tables import DEVICE_OBJECT

_AVAILABLE = frozenset({"torch.cuda.is_available", "torch.backends.mps.is_available"})


class DeviceSelection(CodemodRule):
    ID = "FRY008"
    NAME = "placement.device-selection"
    DESCRIPTION = ('torch.device("cuda" if torch.cuda.is_available() else "cpu") -> the device variable, defined as '
                   "torch.accelerator.current_accelerator() with a CPU fallback; the string choice itself "
                   '("cuda" if torch.cuda.is_available() else "cpu") stays a string (catalogue 53): the '
                   "accelerator's type name, \"cpu\" without one.")
    CATEGORY = "auto"
    ENTRIES = (8,)

    def _is_cuda_branch(self, node: cst.BaseExpression) -> bool:
        if cuda_device_string(node)[0]:
            return True
        return (isinstance(node, cst.Call) and self.qname_in(node.func, DEVICE_OBJECT) is not None
                and bool(node.args) and cuda_device_string(node.args[0].value)[0])

    def _is_cpu_branch(self, node: cst.BaseExpression) -> bool:
        if string_value(node) == "cpu":
            return True
        return (isinstance(node, cst.Call) and self.qname_in(node.func, DEVICE_OBJECT) is not None
                and len(node.args) == 1 and string_value(node.args[0].value) == "cpu")

    def visit_IfExp(self, node: cst.IfExp) -> None:
        test = node.test
        if not (isinstance(test, cst.Call) and self.qname_in(test.func, _AVAILABLE) is not None):
            return
        if not (self._is_cuda_branch(node.body) and self._is_cpu_branch(node.orelse)):
            if "cuda" in (dotted(test.func) or "") and (self._is_cuda_branch(node.body)):
                self.hit(node, "device selection with a non-CPU fallback", category="review",
                         suggestion=self.dev)
            return
        target: cst.CSTNode = node
        parent = self.parent(node)
        if isinstance(parent, cst.Arg) and parent.keyword is None:
            call = self.parent(parent)
            if isinstance(call, cst.Call) and len(call.args) == 1 and self.qname_in(call.func, DEVICE_OBJECT):
                target = call
        if target is node and cuda_device_string(node.body)[0] and string_value(node.orelse) == "cpu":
            ordinal = cuda_device_string(node.body)[1]
            self.string_device_hit(node, "CUDA-or-CPU selection ignores other accelerators", ordinal or None)
            return
        ref = self.device_ref(target)
        self.hit(target, "CUDA-or-CPU selection ignores other accelerators", category="auto", suggestion=ref,
                 needs_device=True, transform=lambda updated: expr(ref))


RULE = DeviceSelection
