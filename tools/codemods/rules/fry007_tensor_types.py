"""FRY007 (placement.tensor-types): torch.cuda.FloatTensor(...) and friends, x.type() == "torch.cuda.X"."""

from __future__ import annotations

import libcst as cst

from tools.codemods.base import Rule, RuleContext
from tools.codemods.nodes import args_then, code, expr, string_value
from tools.codemods.tables import TENSOR_TYPES

_TYPE_STRINGS = {name: dtype for name, dtype in TENSOR_TYPES.items()}


class TensorTypes(Rule):
    ID = "FRY007"
    NAME = "placement.tensor-types"
    DESCRIPTION = ("torch.cuda.FloatTensor(2, 3) -> torch.empty(2, 3, dtype=..., device=device); "
                   "torch.cuda.FloatTensor([..]) -> torch.tensor([..], dtype=..., device=device); "
                   "x.type(torch.cuda.FloatTensor) -> x.to(device=device, dtype=...); "
                   'x.type() == "torch.cuda.FloatTensor", isinstance checks -> review.')
    CATEGORY = "auto"
    ENTRIES = (7,)

    def __init__(self, ctx: RuleContext) -> None:
        super().__init__(ctx)
        self._handled: set[int] = set()

    def visit_Call(self, node: cst.Call) -> None:
        name = self.qname_in(node.func, TENSOR_TYPES)
        if name is not None:
            self._handled.add(id(node.func))
            dtype = self.torch_text(TENSOR_TYPES[name])
            args = node.args
            ref = self.device_ref(node)
            torch = self.ctx.torch_name or "torch"
            if args and all(isinstance(a.value, cst.Integer) and a.keyword is None for a in args):
                factory = "empty"
            elif len(args) == 1 and args[0].keyword is None and isinstance(args[0].value, (cst.List, cst.Tuple)):
                factory = "tensor"
            else:
                self.hit(node, f"{name}(...) with arguments whose meaning (shape or data) is unclear",
                         category="review", suggestion=f"torch.tensor(data, dtype={dtype}, device={self.dev})")
                return

            def transform(updated: cst.CSTNode) -> cst.CSTNode:
                assert isinstance(updated, cst.Call)
                return expr(f"{torch}.{factory}({args_then(updated.args, f'dtype={dtype}, device={ref}')})")

            self.hit(node, f"{name} allocates on CUDA", category="auto", transform=transform,
                     suggestion=f"{torch}.{factory}(..., dtype={dtype}, device={ref})", needs_device=True)
            return
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value == "type" and len(node.args) == 1:
            tname = self.qname_in(node.args[0].value, TENSOR_TYPES)
            if tname is not None and node.args[0].keyword is None:
                self._handled.add(id(node.args[0].value))
                dtype = self.torch_text(TENSOR_TYPES[tname])
                ref = self.device_ref(node)

                def transform2(updated: cst.CSTNode) -> cst.CSTNode:
                    assert isinstance(updated, cst.Call) and isinstance(updated.func, cst.Attribute)
                    return expr(f"{code(updated.func.value)}.to(device={ref}, dtype={dtype})")

                self.hit(node, f".type({tname}) converts to a CUDA tensor", category="auto", transform=transform2,
                         suggestion=f".to(device={ref}, dtype={dtype})", needs_device=True)

    def _reference(self, node: cst.CSTNode) -> None:
        if id(node) in self._handled or not self.is_outermost_attribute(node):
            return
        name = self.qname_in(node, TENSOR_TYPES)
        if name is None:
            return
        parent = self.parent(node)
        if isinstance(parent, (cst.ImportAlias,)):
            return
        self.hit(node, f"{name} as a type check is False on other devices", category="review",
                 suggestion=f"x.device.type == {self.dev}.type and x.dtype == {TENSOR_TYPES[name]}")

    def leave_Name(self, original_node: cst.Name) -> None:
        self._reference(original_node)

    def leave_Attribute(self, original_node: cst.Attribute) -> None:
        self._reference(original_node)

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        value = string_value(node)
        if value in _TYPE_STRINGS:
            self.hit(node, f'x.type() == "{value}" compares a CUDA type string', category="review",
                     suggestion=f"x.device.type == {self.dev}.type and x.dtype == {_TYPE_STRINGS[value]}")


RULE = TensorTypes
