"""FRY043 (profile.nvtx): torch.cuda.nvtx ranges, emit_nvtx, pynvml -> review (torch.profiler.record_function)."""

from __future__ import annotations

from tools.codemods.generic import NameReportRule
from tools.codemods.tables import NVTX_MODULES, NVTX_NAMES


class Nvtx(NameReportRule):
    ID = "FRY043"
    NAME = "profile.nvtx"
    DESCRIPTION = "torch.cuda.nvtx ranges, emit_nvtx, pynvml -> review (torch.profiler.record_function)."
    CATEGORY = "review"
    ENTRIES = (43,)
    NAMES = NVTX_NAMES
    MODULES = NVTX_MODULES


RULE = Nvtx
