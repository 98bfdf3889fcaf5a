"""FRY024 (amp.autocast): torch.cuda.amp.autocast(...) / torch.autocast("cuda") ->
torch.autocast(device_type=device.type, ...)."""

from __future__ import annotations

import libcst as cst

from tools.codemods.base import CodemodRule
from tools.codemods.nodes import args_after, expr, kwarg, positional
from tools.codemods.tables import AUTOCAST_CUDA, AUTOCAST_GENERIC


class Autocast(CodemodRule):
    ID = "FRY024"
    NAME = "amp.autocast"
    DESCRIPTION = ('torch.cuda.amp.autocast(...) and torch.autocast("cuda", ...) -> '
                   "torch.autocast(device_type=device.type, ...).")
    CATEGORY = "auto"
    ENTRIES = (24,)

    def visit_Call(self, node: cst.Call) -> None:
        name = self.qname_in(node.func, AUTOCAST_CUDA)
        dtype = self.device_type(node)
        torch = self.ctx.torch_name or "torch"
        if name is not None:
            if positional(node):
                self.hit(node, f"{name} with positional arguments", category="review",
                         suggestion=f"{torch}.autocast(device_type={dtype}, enabled=..., dtype=...)")
                return

            def transform(updated: cst.CSTNode) -> cst.CSTNode:
                assert isinstance(updated, cst.Call)
                new = expr(f"{torch}.autocast({args_after(f'device_type={dtype}', updated.args)})")
                return new.with_changes(lpar=updated.lpar, rpar=updated.rpar)

            self.hit(node, f"{name} only autocasts CUDA ops", category="auto", transform=transform,
                     suggestion=f"{torch}.autocast(device_type={dtype}, ...)", needs_device=True)
            return
        if self.qname_in(node.func, AUTOCAST_GENERIC) is None:
            return
        pos = positional(node)
        self.cuda_device_type_arg(node, pos[0] if pos else kwarg(node, "device_type"),
                                  'autocast("cuda") only autocasts CUDA ops')


RULE = Autocast
