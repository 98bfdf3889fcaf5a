"""FRY006 (placement.is-cuda): x.is_cuda -> x.device.type == device.type."""

from __future__ import annotations

import libcst as cst

from tools.codemods.base import Rule
from tools.codemods.nodes import code, expr

_NEEDS_PARENS = (cst.Comparison, cst.BinaryOperation, cst.Attribute, cst.Subscript, cst.Call)


class IsCuda(Rule):
    ID = "FRY006"
    NAME = "placement.is-cuda"
    DESCRIPTION = "x.is_cuda -> x.device.type == device.type (true on the target accelerator)."
    CATEGORY = "auto"
    ENTRIES = (6,)

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if node.attr.value != "is_cuda":
            return
        parent = self.parent(node)
        if isinstance(parent, (cst.Assign, cst.AugAssign)) and any(
                getattr(t, "target", None) is node for t in getattr(parent, "targets", ())):
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
