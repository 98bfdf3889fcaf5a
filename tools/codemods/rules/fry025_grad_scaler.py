"""FRY025 (amp.grad-scaler): torch.cuda.amp.GradScaler(...) -> torch.amp.GradScaler(device.type, ...)."""

from __future__ import annotations

import libcst as cst

from tools.codemods.base import CodemodRule
from tools.codemods.nodes import args_after, expr, kwarg, positional
from tools.codemods.tables import GRADSCALER_CUDA, GRADSCALER_GENERIC


class GradScaler(CodemodRule):
    ID = "FRY025"
    NAME = "amp.grad-scaler"
    DESCRIPTION = ('torch.cuda.amp.GradScaler(...) and torch.amp.GradScaler("cuda") -> '
                   'torch.amp.GradScaler(device.type, ...).')
    CATEGORY = "auto"
    ENTRIES = (25,)

    def visit_Call(self, node: cst.Call) -> None:
        dtype = self.device_type(node)
        torch = self.ctx.torch_name or "torch"
        name = self.qname_in(node.func, GRADSCALER_CUDA)
        if name is not None:
            def transform(updated: cst.CSTNode) -> cst.CSTNode:
                assert isinstance(updated, cst.Call)
                return expr(f"{torch}.amp.GradScaler({args_after(dtype, updated.args)})")

            self.hit(node, f"{name} scales CUDA gradients only", category="auto", transform=transform,
                     suggestion=f"{torch}.amp.GradScaler({dtype}, ...)", needs_device=True)
            return
        if self.qname_in(node.func, GRADSCALER_GENERIC) is None:
            return
        pos = positional(node)
        self.cuda_device_type_arg(node, pos[0] if pos else kwarg(node, "device"), 'GradScaler("cuda") targets CUDA')


RULE = GradScaler
