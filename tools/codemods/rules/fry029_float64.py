"""FRY029 (dtype.float64): float64 on device tensors -> float32 (tpx has no fp64); fp64 elsewhere -> review.

``torch.set_default_dtype(torch.float64)`` (catalogue 61) is reported as one finding of its own: every
floating factory of the program then makes float64, so it is the program's precision choice, not a
line to rewrite; the policy's float64 fix (FIX002) moves device tensors to float32 when a run fails,
and parity then compares them at the float32 tier."""

from __future__ import annotations

import libcst as cst

from tools.codemods.base import CodemodRule, RuleContext
from tools.codemods.nodes import cuda_device_string, expr, int_value, kwarg, positional
from tools.codemods.tables import DEFAULT_DTYPE_SETTERS, DEVICE_OBJECT, DOUBLE_DTYPES


class Float64(CodemodRule):
    ID = "FRY029"
    NAME = "dtype.float64"
    DESCRIPTION = ("dtype=torch.float64 in a call that places the tensor on the device, and .double() chained "
                   "with .cuda()/.to(device) -> float32; other float64 uses in CUDA modules -> review "
                   "(keep fp64 on CPU-only tensors).")
    CATEGORY = "auto"
    ENTRIES = (29, 61)
    CONTEXTUAL = True
    DTYPE_CHANGES = (("float64", "float32"),)

    def __init__(self, ctx: RuleContext) -> None:
        super().__init__(ctx)
        self._handled: set[int] = set()

    def _is_device_value(self, node: cst.BaseExpression) -> bool:
        if cuda_device_string(node)[0] or int_value(node) == 0:
            return True
        if isinstance(node, cst.Name) and node.value == self.dev:
            return True
        return (isinstance(node, cst.Call) and self.qname_in(node.func, DEVICE_OBJECT) is not None
                and bool(node.args) and cuda_device_string(node.args[0].value)[0])

    def _moves_to_device(self, node: cst.BaseExpression) -> bool:
        if not isinstance(node, cst.Call) or not isinstance(node.func, cst.Attribute):
            return False
        attr = node.func.attr.value
        if attr == "cuda":
            return True
        if attr == "to":
            pos = positional(node)
            arg = pos[0] if pos else kwarg(node, "device")
            return arg is not None and self._is_device_value(arg.value)
        return False

    def visit_Call(self, node: cst.Call) -> None:
        args = positional(node)
        if (self.qname_in(node.func, DEFAULT_DTYPE_SETTERS) and len(args) == 1
                and self.qname_in(args[0].value, DOUBLE_DTYPES)):
            self._handled.add(id(args[0].value))
            self.hit(node, "torch.set_default_dtype(float64): every floating factory makes float64, which tpx "
                     "does not compute", category="review",
                     suggestion="keep it for CPU-only code; for device work use float32 with "
                     "torch.set_float32_matmul_precision('highest') (docs/numerics.md), as the float64 fix does")
            return
        dtype_arg = kwarg(node, "dtype")
        device_arg = kwarg(node, "device")
        if (dtype_arg is not None and device_arg is not None and self._is_device_value(device_arg.value)
                and self.qname_in(dtype_arg.value, DOUBLE_DTYPES)):
            self._handled.add(id(dtype_arg.value))
            f32 = self.torch_text("torch.float32")
            self.hit(dtype_arg.value, "float64 tensor created on the device (tpx has no float64)",
                     category="auto", suggestion=f32, transform=lambda updated: expr(f32))
            return
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value == "double" and not node.args:
            parent = self.parent(node)
            grand = self.parent(parent) if isinstance(parent, cst.Attribute) else None
            if self._moves_to_device(func.value) or (isinstance(grand, cst.Call) and self._moves_to_device(grand)):
                self.hit(node, ".double() on a device tensor (tpx has no float64)", category="auto",
                         suggestion=".float()", transform=_float_call)
            else:
                self.hit(node, ".double(): float64 is unavailable on tpx", category="review",
                         suggestion=".float() if this tensor lives on the device; keep it on CPU-only tensors")

    def _reference(self, node: cst.CSTNode) -> None:
        if id(node) in self._handled or not self.is_outermost_attribute(node):
            return
        if self.qname_in(node, DOUBLE_DTYPES):
            self.hit(node, "float64 is unavailable on tpx", category="review",
                     suggestion="torch.float32 if the tensor lives on the device; keep fp64 on CPU-only tensors")

    def leave_Attribute(self, original_node: cst.Attribute) -> None:
        self._reference(original_node)


def _float_call(updated: cst.CSTNode) -> cst.CSTNode:
    """``x.double()`` -> ``x.float()``."""
    assert isinstance(updated, cst.Call) and isinstance(updated.func, cst.Attribute)
    return updated.with_changes(func=updated.func.with_changes(attr=cst.Name("float")))


RULE = Float64
