"""FRY009 (runtime.availability): torch.cuda.is_available()/device_count() ->
torch.accelerator.is_available()/device_count(); an availability test guarding a C++/CUDA extension build
stays CUDA's (the build needs nvcc and a CUDA GPU; on the accelerator the module keeps its PyTorch path).

``torch.cuda.device_count() // world_size`` (GPUs per process, the DDP example with device lists) becomes
``max(torch.accelerator.device_count() // world_size, 1)``: without an accelerator the count is 0, and the
program's ``device_ids = list(range(rank * n, (rank + 1) * n))`` would be empty; with one device per
process or more it is the same number as before."""

from __future__ import annotations

import libcst as cst

from tools.codemods.cuda_guards import builds_extension, guard_of
from tools.codemods.generic import CallMapRule
from tools.codemods.nodes import code, expr
from tools.codemods.tables import AVAILABILITY_CALLS

_IS_AVAILABLE = frozenset({"torch.cuda.is_available"})
_DEVICE_COUNT = frozenset({"torch.cuda.device_count"})


class Availability(CallMapRule):
    ID = "FRY009"
    NAME = "runtime.availability"
    DESCRIPTION = ("torch.cuda.is_available()/device_count() -> torch.accelerator.is_available()/device_count(); "
                   "torch.cuda.is_available() in the test of an if that builds a C++/CUDA extension "
                   "(torch.utils.cpp_extension.load/load_inline) stays CUDA's (review); "
                   "torch.cuda.device_count() // n -> max(torch.accelerator.device_count() // n, 1) (at least one "
                   "device per process: the CPU where no accelerator is).")
    CATEGORY = "auto"
    ENTRIES = (9,)
    CALLS = AVAILABILITY_CALLS

    def visit_Call(self, node: cst.Call) -> None:
        if self.qname_in(node.func, _IS_AVAILABLE) is not None:
            found = guard_of(node, self.parent)
            if found is not None and builds_extension(found[1]):
                self.hit(node, "torch.cuda.is_available() guards a C++/CUDA extension build: it stays CUDA's, so "
                         "the accelerator keeps the PyTorch path", category="review", suggestion="keep it")
                return
        parent = self.parent(node)
        if (self.qname_in(node.func, _DEVICE_COUNT) is not None and not node.args
                and isinstance(parent, cst.BinaryOperation) and isinstance(parent.operator, cst.FloorDivide)
                and parent.left is node):
            self._per_process(parent)
            return
        super().visit_Call(node)

    def _per_process(self, node: cst.BinaryOperation) -> None:
        count = self.torch_text("torch.accelerator.device_count()")

        def transform(updated: cst.CSTNode) -> cst.CSTNode:
            assert isinstance(updated, cst.BinaryOperation)
            new = expr(f"max({count} // {code(updated.right)}, 1)")
            return new.with_changes(lpar=updated.lpar, rpar=updated.rpar)

        self.hit(node, "torch.cuda.device_count() // n: devices per process, 0 without an accelerator",
                 category="auto", suggestion=code(transform(node)), transform=transform,
                 add_imports=(("torch", None),))


RULE = Availability
