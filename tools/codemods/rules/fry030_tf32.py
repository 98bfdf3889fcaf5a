"""FRY030 (dtype.tf32): torch.backends.cuda.matmul.allow_tf32 = B -> torch.set_float32_matmul_precision(...);
torch.backends.cudnn.allow_tf32 = B is kept (it governs cuDNN convolutions, not matmuls, and is harmless
on other devices) and reported."""

from __future__ import annotations

import libcst as cst

from tools.codemods.base import CodemodRule, RuleContext, Transform
from tools.codemods.nodes import bool_value, expr
from tools.codemods.tables import CUDNN_TF32_FLAG, TF32_FLAGS


class Tf32(CodemodRule):
    ID = "FRY030"
    NAME = "dtype.tf32"
    DESCRIPTION = ('torch.backends.cuda.matmul.allow_tf32 = True/False -> torch.set_float32_matmul_precision('
                   '"high"/"highest"); torch.backends.cudnn.allow_tf32 = B is kept and reported (it governs cuDNN '
                   'convolutions, not matmuls, and is harmless on other devices); reads or non-literal values -> '
                   'review.')
    CATEGORY = "auto"
    ENTRIES = (30,)

    def __init__(self, ctx: RuleContext) -> None:
        super().__init__(ctx)
        self._handled: set[int] = set()

    def visit_Assign(self, node: cst.Assign) -> None:
        if len(node.targets) != 1:
            return
        target = node.targets[0].target
        name = self.qname_in(target, TF32_FLAGS)
        if name is None:
            return
        self._handled.add(id(target))
        if name == CUDNN_TF32_FLAG:
            self.hit(node, f"{name} governs cuDNN convolutions only (not matmuls); kept as written: it has no "
                           "effect on other devices", category="review",
                     suggestion="keep it; on a non-CUDA device convolutions follow the device's own precision")
            return
        value = bool_value(node.value)
        if value is None:
            self.hit(node, f"{name} set from a non-literal", category="review",
                     suggestion='torch.set_float32_matmul_precision("high" if allow else "highest")')
            return
        call = self.torch_text(f'torch.set_float32_matmul_precision("{"high" if value else "highest"}")')
        self.hit(node, f"{name} only affects NVIDIA TF32 units", category="auto", suggestion=call,
                 transform=_statement(call))

    def leave_Attribute(self, original_node: cst.Attribute) -> None:
        if id(original_node) in self._handled or not self.is_outermost_attribute(original_node):
            return
        name = self.qname_in(original_node, TF32_FLAGS)
        if name is not None:
            self.hit(original_node, f"{name} is CUDA-only", category="review",
                     suggestion='torch.get_float32_matmul_precision() != "highest"')


def _statement(text: str) -> Transform:
    """The flag assignment replaced by the expression statement ``text`` (its semicolon kept)."""
    def transform(updated: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(updated, cst.Assign)
        return cst.Expr(value=expr(text), semicolon=updated.semicolon)

    return transform


RULE = Tf32
