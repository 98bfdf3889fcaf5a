"""FRY010 (runtime.device-index): torch.cuda.set_device/current_device ->
torch.accelerator.set_device_index/current_device_index (including LOCAL_RANK-based set_device,
entry 38).

``torch.accelerator.set_device_index`` raises without an accelerator ("Cannot access accelerator device
when none is available"), so a ``set_device`` statement outside an availability test runs only where an
accelerator is: ``torch.accelerator.set_device_index(local_rank) if torch.accelerator.is_available() else
None`` (on CUDA the same call as before; on the CPU there is one device and nothing to select)."""

from __future__ import annotations

import libcst as cst

from tools.codemods.generic import CallMapRule
from tools.codemods.nodes import code, expr
from tools.codemods.tables import DEVICE_INDEX_CALLS

_SET_DEVICE = frozenset({"torch.cuda.set_device"})


class DeviceIndex(CallMapRule):
    ID = "FRY010"
    NAME = "runtime.device-index"
    DESCRIPTION = ("torch.cuda.set_device/current_device -> torch.accelerator.set_device_index/current_device_index "
                   "(including LOCAL_RANK-based set_device, entry 38); a set_device statement outside an "
                   "is_available() test runs only where an accelerator is (the CPU has one device).")
    CATEGORY = "auto"
    ENTRIES = (10,)
    CALLS = DEVICE_INDEX_CALLS

    def visit_Call(self, node: cst.Call) -> None:
        if (self.qname_in(node.func, _SET_DEVICE) is None or not isinstance(self.parent(node), cst.Expr)
                or self._guarded(node) or any(a.keyword is not None for a in node.args)):
            super().visit_Call(node)
            return
        target = self.torch_text("torch.accelerator.set_device_index")
        available = self.torch_text("torch.accelerator.is_available()")

        def transform(updated: cst.CSTNode) -> cst.CSTNode:
            call = self._rewrite(updated, target, [], False)
            return expr(f"{code(call)} if {available} else None")

        self.hit(node, "torch.cuda.set_device() is CUDA-only", category="auto",
                 suggestion=code(transform(node)), transform=transform, add_imports=(("torch", None),))

    def _guarded(self, node: cst.CSTNode) -> bool:
        """Whether ``node`` sits in the body of an ``if`` that tests availability."""
        child, parent = node, self.parent(node)
        while parent is not None and not isinstance(parent, (cst.FunctionDef, cst.ClassDef, cst.Module)):
            if isinstance(parent, cst.If) and child is parent.body and "is_available" in code(parent.test):
                return True
            child, parent = parent, self.parent(parent)
        return False


RULE = DeviceIndex
