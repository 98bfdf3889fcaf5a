"""FRY016 (memory.allocator-internals): memory_snapshot, _record_memory_history,
set_per_process_memory_fraction and other CUDA caching-allocator APIs -> review."""

from __future__ import annotations

from tools.codemods.generic import NameReportRule
from tools.codemods.tables import ALLOCATOR_NAMES


class AllocatorInternals(NameReportRule):
    ID = "FRY016"
    NAME = "memory.allocator-internals"
    DESCRIPTION = ("memory_snapshot, _record_memory_history, set_per_process_memory_fraction and other CUDA "
                   "caching-allocator APIs -> review.")
    CATEGORY = "review"
    ENTRIES = (16,)
    NAMES = ALLOCATOR_NAMES


RULE = AllocatorInternals
