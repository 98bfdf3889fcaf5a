"""FRY009 (runtime.availability): torch.cuda.is_available()/device_count() ->
torch.accelerator.is_available()/device_count(); an availability test guarding a C++/CUDA extension build
stays CUDA's (the build needs nvcc and a CUDA GPU; on the accelerator the module keeps its PyTorch path)."""

from __future__ import annotations

import libcst as cst

from tools.codemods.cuda_guards import builds_extension, guard_of
from tools.codemods.generic import CallMapRule
from tools.codemods.tables import AVAILABILITY_CALLS

_IS_AVAILABLE = frozenset({"torch.cuda.is_available"})


class Availability(CallMapRule):
    ID = "FRY009"
    NAME = "runtime.availability"
    DESCRIPTION = ("torch.cuda.is_available()/device_count() -> torch.accelerator.is_available()/device_count(); "
                   "torch.cuda.is_available() in the test of an if that builds a C++/CUDA extension "
                   "(torch.utils.cpp_extension.load/load_inline) stays CUDA's (review).")
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
        super().visit_Call(node)


RULE = Availability
