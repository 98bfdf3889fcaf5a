"""FRY036 (dist.legacy-parallel): nn.DataParallel, apex DDP, SyncBatchNorm conversion -> review (native DDP)."""

from __future__ import annotations

from tools.codemods.generic import NameReportRule
from tools.codemods.tables import LEGACY_PARALLEL_NAMES


class LegacyParallel(NameReportRule):
    ID = "FRY036"
    NAME = "dist.legacy-parallel"
    DESCRIPTION = "nn.DataParallel, apex DDP, SyncBatchNorm conversion -> review (native DDP)."
    CATEGORY = "review"
    ENTRIES = (36,)
    NAMES = LEGACY_PARALLEL_NAMES


RULE = LegacyParallel
