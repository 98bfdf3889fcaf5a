"""FRY014 (memory.stats): torch.cuda memory statistics/empty_cache -> torch.accelerator memory APIs."""

from __future__ import annotations

from tools.codemods.generic import CallMapRule
from tools.codemods.tables import MEMORY_CALLS


class MemoryStats(CallMapRule):
    ID = "FRY014"
    NAME = "memory.stats"
    DESCRIPTION = ("torch.cuda memory statistics/empty_cache -> torch.accelerator memory APIs, answering what "
                   "torch.cuda answers without a GPU where no accelerator is: `(torch.accelerator.X() if "
                   "torch.accelerator.is_available() else 0)` (memory_stats: {}; empty_cache and the resets: "
                   "None), unless an availability or device-type test already guards the call.")
    CATEGORY = "auto"
    ENTRIES = (14,)
    CALLS = MEMORY_CALLS


RULE = MemoryStats
