"""FRY019 (streams.event): torch.cuda.Event(...) timing pairs -> torch.Event(device=device, ...) with --device tpx;
review (perf_counter + synchronize) for device-generic output, since CPU has no events."""

from __future__ import annotations

import libcst as cst

from tools.codemods.generic import CallMapRule
from tools.codemods.tables import EVENT_CALLS


class Events(CallMapRule):
    ID = "FRY019"
    NAME = "streams.event"
    DESCRIPTION = ("torch.cuda.Event(...) -> torch.Event(device=device, ...) with --device tpx; with the default "
                   "device-generic output it is review: CPU has no events, so time with time.perf_counter() around "
                   "torch.get_device_module(device).synchronize().")
    CATEGORY = "auto"
    ENTRIES = (19,)
    CALLS = EVENT_CALLS

    def visit_Call(self, node: cst.Call) -> None:
        name = self.qname_in(node.func, self.CALLS)
        if name is None:
            return
        if self.ctx.device_mode == "accelerator":
            self.hit(node, f"{name}: the CPU fallback has no events", category="review",
                     suggestion="time.perf_counter() around torch.get_device_module(device).synchronize(), "
                                "or torch.Event(device=device, enable_timing=True) where the device has events")
            return
        super().visit_Call(node)


RULE = Events
