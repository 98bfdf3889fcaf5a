"""FRY039 (data.pin-memory): DataLoader(pin_memory=True) -> review (pins for CUDA; drop or pin for the target)."""

from __future__ import annotations

import libcst as cst

from tools.codemods.base import Rule
from tools.codemods.nodes import bool_value, kwarg
from tools.codemods.tables import DATALOADER


class PinMemory(Rule):
    ID = "FRY039"
    NAME = "data.pin-memory"
    DESCRIPTION = ("DataLoader(pin_memory=True) -> review: pinned memory targets CUDA; use pin_memory_device or drop "
                   "it on tpx.")
    CATEGORY = "review"
    ENTRIES = (39,)

    def visit_Call(self, node: cst.Call) -> None:
        if self.qname_in(node.func, DATALOADER) is None:
            return
        arg = kwarg(node, "pin_memory")
        if arg is not None and bool_value(arg.value) is not False:
            self.hit(arg, "pin_memory pins host memory for CUDA copies",
                     suggestion=f"pin_memory={self.dev}.type == \"cuda\" (tpx computes in host memory)")


RULE = PinMemory
