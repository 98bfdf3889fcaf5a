"""FRY028 (dtype.half): .half() / torch.float16 where the target prefers bf16 -> review with a dtype policy."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import libcst as cst

from tools.codemods.generic import NameReportRule
from tools.codemods.tables import HALF_DTYPES, Report

_MSG = Report("float16 is a CUDA-era default; tpx computes float16 through float32 and prefers bfloat16",
              "torch.bfloat16 (a dtype policy: one module-level `dtype = ...` switch)")


class HalfPrecision(NameReportRule):
    ID = "FRY028"
    NAME = "dtype.half"
    DESCRIPTION = ".half() and torch.float16/torch.half in modules that use CUDA -> review (bf16 policy)."
    CATEGORY = "review"
    ENTRIES = (28,)
    CONTEXTUAL = True
    NAMES: ClassVar[Mapping[str, Report]] = {name: _MSG for name in HALF_DTYPES}

    def visit_Call(self, node: cst.Call) -> None:
        if isinstance(node.func, cst.Attribute) and node.func.attr.value == "half" and not node.args:
            self._report(node, _MSG)


RULE = HalfPrecision
