"""FRY025 (amp.grad-scaler): torch.cuda.amp.GradScaler(...) -> torch.amp.GradScaler(device.type, ...)."""

from __future__ import annotations

import libcst as cst

from tools.codemods.base import Rule
from tools.codemods.nodes import code, cuda_device_string, expr, kwarg, positional
from tools.codemods.tables import GRADSCALER_CUDA, GRADSCALER_GENERIC


class GradScaler(Rule):
    ID = "FRY025"
    NAME = "amp.grad-scaler"
    DESCRIPTION = 'torch.cuda.amp.GradScaler(...) and torch.amp.GradScaler("cuda") -> torch.amp.GradScaler(device.type, ...).'
    CATEGORY = "auto"
    ENTRIES = (25,)

    def visit_Call(self, node: cst.Call) -> None:
        dtype = self.device_type(node)
        torch = self.ctx.torch_name or "torch"
        name = self.qname_in(node.func, GRADSCALER_CUDA)
        if name is not None:
            def transform(updated: cst.CSTNode) -> cst.CSTNode:
                assert isinstance(updated, cst.Call)
                rest = "".join(code(a) for a in updated.args)
                return expr(f"{torch}.amp.GradScaler({dtype}{', ' + rest if rest else ''})")

            self.hit(node, f"{name} scales CUDA gradients only", category="auto", transform=transform,
                     suggestion=f"{torch}.amp.GradScaler({dtype}, ...)", needs_device=True)
            return
        if self.qname_in(node.func, GRADSCALER_GENERIC) is None:
            return
        pos = positional(node)
        arg = pos[0] if pos else kwarg(node, "device")
        if arg is not None and cuda_device_string(arg.value)[0]:
            self.hit(arg.value, 'GradScaler("cuda") targets CUDA', category="auto", suggestion=dtype,
                     transform=lambda updated: expr(dtype), needs_device=True)


RULE = GradScaler
