"""FRY041 (compile.torchscript): torch.jit.script/trace -> review (runs eagerly; flag for the target)."""

from __future__ import annotations

from tools.codemods.generic import NameReportRule
from tools.codemods.tables import JIT_NAMES


class TorchScript(NameReportRule):
    ID = "FRY041"
    NAME = "compile.torchscript"
    DESCRIPTION = "torch.jit.script/trace -> review (runs eagerly; flag for the target)."
    CATEGORY = "review"
    ENTRIES = (41,)
    CONTEXTUAL = True
    NAMES = JIT_NAMES


RULE = TorchScript
