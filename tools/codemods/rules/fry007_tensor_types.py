"""FRY007 (placement.tensor-types): torch.cuda.FloatTensor(...) and friends, x.type() == "torch.cuda.X".

Type checks on a plain name or attribute (evaluated twice by the rewrite, so nothing with a call in it) become
device-generic: ``x.type() == "torch.cuda.FloatTensor"`` -> ``x.device.type == device.type and x.dtype ==
torch.float32`` (``!=`` -> the negation), ``isinstance(x, torch.cuda.FloatTensor)`` -> ``isinstance(x,
torch.Tensor) and x.device.type == device.type and x.dtype == torch.float32``. Other receivers, tuples of
types and type strings used any other way stay review.
"""

from __future__ import annotations

import libcst as cst

from tools.codemods.base import CodemodRule, RuleContext
from tools.codemods.nodes import args_then, code, dotted, expr, string_value
from tools.codemods.tables import TENSOR_TYPES

_TYPE_STRINGS = {name: dtype for name, dtype in TENSOR_TYPES.items()}
_ISINSTANCE = frozenset({"builtins.isinstance"})
#: parents in which a boolean operation stands without parentheses
_BARE_PARENTS = (cst.If, cst.While, cst.Assert, cst.Assign, cst.AnnAssign, cst.Return, cst.Arg, cst.Expr)


class TensorTypes(CodemodRule):
    ID = "FRY007"
    NAME = "placement.tensor-types"
    DESCRIPTION = ("torch.cuda.FloatTensor(2, 3) -> torch.empty(2, 3, dtype=..., device=device); "
                   "torch.cuda.FloatTensor([..]) -> torch.tensor([..], dtype=..., device=device); "
                   "x.type(torch.cuda.FloatTensor) -> x.to(device=device, dtype=...); "
                   'x.type() == "torch.cuda.FloatTensor" -> x.device.type == device.type and x.dtype == '
                   'torch.float32; isinstance(x, torch.cuda.FloatTensor) -> isinstance(x, torch.Tensor) and the '
                   'same; other type checks -> review.')
    CATEGORY = "auto"
    ENTRIES = (7,)

    def __init__(self, ctx: RuleContext) -> None:
        super().__init__(ctx)
        self._handled: set[int] = set()

    def _check_text(self, node: cst.CSTNode, subject: cst.BaseExpression, dtype: str, *, negate: bool = False,
                    instance: bool = False) -> str:
        value = code(subject)
        dtype = self.torch_text(dtype)
        dev_type = self.device_type(node)
        if negate:
            return f"{value}.device.type != {dev_type} or {value}.dtype != {dtype}"
        tensor = f"isinstance({value}, {self.torch_text('torch.Tensor')}) and " if instance else ""
        return f"{tensor}{value}.device.type == {dev_type} and {value}.dtype == {dtype}"

    def _auto_check(self, node: cst.CSTNode, message: str, text: str) -> None:
        bare = isinstance(self.parent(node), _BARE_PARENTS)
        new = expr(text if bare else f"({text})")

        def transform(updated: cst.CSTNode) -> cst.CSTNode:
            return new.with_changes(lpar=getattr(updated, "lpar", ()), rpar=getattr(updated, "rpar", ())) \
                if bare else new

        self.hit(node, message, category="auto", suggestion=text, transform=transform, needs_device=True,
                 add_imports=(("torch", None),))

    def visit_Comparison(self, node: cst.Comparison) -> None:
        if len(node.comparisons) != 1 or not isinstance(node.comparisons[0].operator, (cst.Equal, cst.NotEqual)):
            return
        left, right = node.left, node.comparisons[0].comparator
        for call, string in ((left, right), (right, left)):
            value = string_value(string) if isinstance(string, cst.SimpleString) else None
            if value not in _TYPE_STRINGS or not isinstance(call, cst.Call) or call.args:
                continue
            if not (isinstance(call.func, cst.Attribute) and call.func.attr.value == "type"):
                continue
            subject = call.func.value
            if dotted(subject) is None:
                return  # evaluated twice by the rewrite: review (visit_SimpleString)
            self._handled.add(id(string))
            negate = isinstance(node.comparisons[0].operator, cst.NotEqual)
            self._auto_check(node, f'x.type() == "{value}" compares a CUDA type string',
                             self._check_text(node, subject, _TYPE_STRINGS[value], negate=negate))
            return

    def visit_Call(self, node: cst.Call) -> None:
        if len(node.args) == 2 and all(a.keyword is None and not a.star for a in node.args) \
                and self.qname_in(node.func, _ISINSTANCE) is not None:
            kind = self.qname_in(node.args[1].value, TENSOR_TYPES)
            if kind is not None and dotted(node.args[0].value) is not None:
                self._handled.add(id(node.args[1].value))
                self._auto_check(node, f"isinstance(x, {kind}) is False on other devices",
                                 self._check_text(node, node.args[0].value, TENSOR_TYPES[kind], instance=True))
                return
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
        if id(node) in self._handled:
            return
        value = string_value(node)
        if value in _TYPE_STRINGS:
            self.hit(node, f'x.type() == "{value}" compares a CUDA type string', category="review",
                     suggestion=f"x.device.type == {self.dev}.type and x.dtype == {_TYPE_STRINGS[value]}")


RULE = TensorTypes
