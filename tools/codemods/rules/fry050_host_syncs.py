"""FRY050 (perf.host-sync): .item()/.cpu()/.numpy()/.tolist() inside training loops -> reported (profiler territory)."""

from __future__ import annotations

import libcst as cst

from tools.codemods.base import Rule
from tools.codemods.loops import LoopTracker, enclosing_loop
from tools.codemods.tables import SYNC_METHODS


class HostSyncs(Rule):
    ID = "FRY050"
    NAME = "perf.host-sync"
    DESCRIPTION = (".item(), .cpu(), .numpy(), .tolist() inside a training loop (one that calls backward/step): "
                   "each forces a device-to-host sync. Reported only; codemods do not change it.")
    CATEGORY = "review"
    ENTRIES = (50,)
    CONTEXTUAL = True

    def __init__(self, ctx) -> None:  # type: ignore[no-untyped-def]
        super().__init__(ctx)
        self._loops = LoopTracker()

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if not (isinstance(func, cst.Attribute) and func.attr.value in SYNC_METHODS and not node.args):
            return
        loop = enclosing_loop(node, self.parent)
        if loop is not None and self._loops.is_training_loop(loop):
            self.hit(node, f".{func.attr.value}() in the training loop syncs the device every step",
                     suggestion="accumulate on the device and read the value every N steps")


RULE = HostSyncs
