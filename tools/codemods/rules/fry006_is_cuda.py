"""FRY006 (placement.is-cuda): x.is_cuda -> x.device.type == device.type; a guard of CUDA-only code
(``if _ext is not None and x.is_cuda:``, ``if HAS_FLASH_ATTN and q.is_cuda:``) stays CUDA-only."""

from __future__ import annotations

import libcst as cst

from tools.codemods.base import CodemodRule
from tools.codemods.cuda_guards import cuda_only_names, guard_of, guards_cuda_only_code
from tools.codemods.nodes import code, expr

_NEEDS_PARENS = (cst.Comparison, cst.BinaryOperation, cst.Attribute, cst.Subscript, cst.Call)


class IsCuda(CodemodRule):
    ID = "FRY006"
    NAME = "placement.is-cuda"
    DESCRIPTION = ("x.is_cuda -> x.device.type == device.type (true on the target accelerator); x.is_cuda in "
                   "the test of a guard of CUDA-only code (a flash_attn/apex/xformers/Triton kernel, a C++/CUDA "
                   "extension built with cpp_extension.load, what calls them) stays CUDA-only (review).")
    CATEGORY = "auto"
    ENTRIES = (6,)

    def __init__(self, ctx):  # type: ignore[no-untyped-def]
        super().__init__(ctx)
        self._cuda_only: frozenset[str] | None = None

    def _guards_cuda_only_code(self, node: cst.CSTNode) -> bool:
        found = guard_of(node, self.parent)
        if found is None:
            return False
        if self._cuda_only is None:
            module = self.ctx.module
            self._cuda_only = cuda_only_names(module) if module is not None else frozenset()
        return guards_cuda_only_code(found[0], found[1], self._cuda_only)

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if node.attr.value != "is_cuda":
            return
        parent = self.parent(node)
        if isinstance(parent, (cst.Assign, cst.AugAssign)) and any(
                getattr(t, "target", None) is node for t in getattr(parent, "targets", ())):
            return
        if self._guards_cuda_only_code(node):
            self.hit(node, "is_cuda guards CUDA-only code (a CUDA kernel, extension or library): it stays "
                     "CUDA-only, so the accelerator takes the PyTorch path", category="review",
                     suggestion="keep it")
            return
        dtype = self.device_type(node)
        wrap = isinstance(parent, _NEEDS_PARENS) or (
            isinstance(parent, cst.UnaryOperation) and not isinstance(parent.operator, cst.Not))

        def transform(updated: cst.CSTNode) -> cst.CSTNode:
            assert isinstance(updated, cst.Attribute)
            text = f"{code(updated.value)}.device.type == {dtype}"
            return expr(f"({text})" if wrap else text)

        self.hit(node, "is_cuda is False on every other device", category="auto",
                 suggestion=f"{code(node.value)}.device.type == {dtype}", transform=transform, needs_device=True)


RULE = IsCuda
