"""FRY045 (kernels.triton): @triton.jit kernels and triton imports -> unsupported on tpx (eager fallback)."""

from __future__ import annotations

from tools.codemods.generic import NameReportRule
from tools.codemods.tables import TRITON_MODULES, TRITON_NAMES


class Triton(NameReportRule):
    ID = "FRY045"
    NAME = "kernels.triton"
    DESCRIPTION = "@triton.jit kernels and triton imports -> unsupported on tpx (eager fallback)."
    CATEGORY = "unsupported"
    ENTRIES = (45,)
    NAMES = TRITON_NAMES
    MODULES = TRITON_MODULES


RULE = Triton
