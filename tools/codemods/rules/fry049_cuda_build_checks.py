"""FRY049 (runtime.cuda-build): `import torch.cuda`, torch.version.cuda, cudnn.version() and unmapped
torch.cuda APIs -> review."""

from __future__ import annotations

import libcst as cst

from tools.codemods.base import RuleContext
from tools.codemods.generic import NameReportRule, _in_import
from tools.codemods.nodes import code
from tools.codemods.tables import CUDA_VERSION_NAMES, KNOWN_CUDA_NAMES


class CudaBuildChecks(NameReportRule):
    ID = "FRY049"
    NAME = "runtime.cuda-build"
    DESCRIPTION = ("`import torch.cuda` side effects, torch.version.cuda / torch.backends.cudnn.version() checks, and "
                   "any torch.cuda.* API no other rule maps -> review.")
    CATEGORY = "review"
    ENTRIES = (49,)
    NAMES = CUDA_VERSION_NAMES

    def visit_Import(self, node: cst.Import) -> None:
        if any(code(alias.name) == "torch.cuda" and alias.asname is None for alias in node.names):
            self.hit(node, "`import torch.cuda` only matters for its CUDA side effects",
                     suggestion="import torch (use torch.accelerator APIs)")

    def __init__(self, ctx: RuleContext) -> None:
        super().__init__(ctx)
        self._cuda_bound: set[str] = set()  # names bound by `from torch.cuda... import x`

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        super().visit_ImportFrom(node)
        if node.module is None or node.relative or isinstance(node.names, cst.ImportStar):
            return
        module = code(node.module)
        if module.startswith("torch.cuda") or module == "torch":
            for alias in node.names:
                bound = alias.asname.name if alias.asname else alias.name
                if isinstance(bound, cst.Name):
                    self._cuda_bound.add(bound.value)

    def _check(self, node: cst.CSTNode) -> None:
        super()._check(node)
        # cheap syntactic gate before the metadata lookup: a torch.cuda.* name is spelled with
        # "cuda" or starts from a name imported from torch.cuda
        leftmost = node
        while isinstance(leftmost, cst.Attribute):
            leftmost = leftmost.value
        if not isinstance(leftmost, cst.Name):
            return
        if leftmost.value not in self._cuda_bound and not (
                isinstance(node, cst.Attribute) and "cuda" in code(node)):
            return
        if not self.is_outermost_attribute(node):
            return
        for name in self.qnames(node):
            if name.startswith("torch.cuda.") and name not in KNOWN_CUDA_NAMES and name not in self.NAMES:
                if _in_import(node, self):
                    return
                self.hit(node, f"{name} has no device-generic mapping",
                         suggestion="torch.accelerator / torch.get_device_module(device) equivalent, or guard with "
                                    "`if device.type == \"cuda\":`")
                return


RULE = CudaBuildChecks
