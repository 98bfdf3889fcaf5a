"""FRY031 (dtype.cudnn-flags): torch.backends.cudnn.benchmark/deterministic/enabled -> review (drop or
guard; use_deterministic_algorithms for determinism).

Aliases (``import torch.backends.cudnn as cudnn``, ``from torch.backends import cudnn``; catalogue 60) resolve to
the same qualified names, so ``cudnn.benchmark = True`` is reported exactly like the full name."""

from __future__ import annotations

from tools.codemods.generic import NameReportRule
from tools.codemods.tables import CUDNN_FLAG_NAMES


class CudnnFlags(NameReportRule):
    ID = "FRY031"
    NAME = "dtype.cudnn-flags"
    DESCRIPTION = ("torch.backends.cudnn.benchmark/deterministic/enabled -> review (drop or guard; "
                   "use_deterministic_algorithms for determinism).")
    CATEGORY = "review"
    ENTRIES = (31, 60)
    NAMES = CUDNN_FLAG_NAMES


RULE = CudnnFlags
