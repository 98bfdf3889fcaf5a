"""FRY014 (memory.stats): torch.cuda memory statistics/empty_cache -> torch.accelerator memory APIs."""

from __future__ import annotations

from tools.codemods.generic import CallMapRule
from tools.codemods.tables import MEMORY_CALLS


class MemoryStats(CallMapRule):
    ID = "FRY014"
    NAME = "memory.stats"
    DESCRIPTION = "torch.cuda memory statistics/empty_cache -> torch.accelerator memory APIs."
    CATEGORY = "auto"
    ENTRIES = (14,)
    CALLS = MEMORY_CALLS


RULE = MemoryStats
