"""FRY027 (amp.autocast-state): torch.is_autocast_enabled() without a device, get_autocast_gpu_dtype()
-> device-typed forms."""

from __future__ import annotations

import libcst as cst

from tools.codemods.generic import CallMapRule
from tools.codemods.tables import AUTOCAST_STATE_CALLS

_IS_ENABLED = frozenset({"torch.is_autocast_enabled"})


class AutocastState(CallMapRule):
    ID = "FRY027"
    NAME = "amp.autocast-state"
    DESCRIPTION = ("torch.is_autocast_enabled() (no device) -> torch.is_autocast_enabled(device.type); "
                   "torch.get_autocast_gpu_dtype() -> torch.get_autocast_dtype(device.type).")
    CATEGORY = "auto"
    ENTRIES = (27,)
    CALLS = AUTOCAST_STATE_CALLS

    def visit_Call(self, node: cst.Call) -> None:
        if node.args and self.qname_in(node.func, _IS_ENABLED):
            return  # already names a device type
        super().visit_Call(node)


RULE = AutocastState
