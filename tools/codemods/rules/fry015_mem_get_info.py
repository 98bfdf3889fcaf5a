"""FRY015 (memory.mem-get-info): torch.cuda.mem_get_info() -> torch.accelerator.get_memory_info()."""

from __future__ import annotations

from tools.codemods.generic import CallMapRule
from tools.codemods.tables import MEM_INFO_CALLS


class MemGetInfo(CallMapRule):
    ID = "FRY015"
    NAME = "memory.mem-get-info"
    DESCRIPTION = "torch.cuda.mem_get_info() -> torch.accelerator.get_memory_info()."
    CATEGORY = "auto"
    ENTRIES = (15,)
    CALLS = MEM_INFO_CALLS


RULE = MemGetInfo
