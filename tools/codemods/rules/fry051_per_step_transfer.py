"""FRY051 (perf.per-step-transfer): tensors created on CPU then moved with .to()/.cuda() every step -> reported."""

from __future__ import annotations

import libcst as cst

from tools.codemods.base import CodemodRule, RuleContext
from tools.codemods.loops import LoopTracker, enclosing_loop
from tools.codemods.nodes import kwarg
from tools.codemods.tables import TENSOR_FACTORIES


class PerStepTransfer(CodemodRule):
    ID = "FRY051"
    NAME = "perf.per-step-transfer"
    DESCRIPTION = ("torch.zeros(...).to(device) / torch.tensor(...).cuda() inside a training loop: created on CPU "
                   "and copied every step; create it on the device instead. Reported only.")
    CATEGORY = "review"
    ENTRIES = (51,)
    CONTEXTUAL = True

    def __init__(self, ctx: RuleContext) -> None:
        super().__init__(ctx)
        self._loops = LoopTracker()

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if not (isinstance(func, cst.Attribute) and func.attr.value in ("to", "cuda")):
            return
        inner = func.value
        if not (isinstance(inner, cst.Call) and self.qname_in(inner.func, TENSOR_FACTORIES)
                and kwarg(inner, "device") is None):
            return
        loop = enclosing_loop(node, self.parent)
        if loop is not None and self._loops.is_training_loop(loop):
            self.hit(node, "tensor created on CPU and copied to the device every step",
                     suggestion=f"pass device={self.dev} to the factory (or hoist it out of the loop)")


RULE = PerStepTransfer
