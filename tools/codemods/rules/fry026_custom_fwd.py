"""FRY026 (amp.custom-fwd): @torch.cuda.amp.custom_fwd/custom_bwd -> @torch.amp.custom_fwd(device_type=device.type)."""

from __future__ import annotations

import libcst as cst

from tools.codemods.base import Rule
from tools.codemods.nodes import code, cuda_device_string, expr, kwarg
from tools.codemods.tables import CUSTOM_AUTOGRAD_CUDA

_GENERIC = frozenset(CUSTOM_AUTOGRAD_CUDA.values())


class CustomFwd(Rule):
    ID = "FRY026"
    NAME = "amp.custom-fwd"
    DESCRIPTION = ("@torch.cuda.amp.custom_fwd / custom_bwd (bare or called) -> "
                   "@torch.amp.custom_fwd(device_type=device.type, ...).")
    CATEGORY = "auto"
    ENTRIES = (26,)

    def visit_Decorator(self, node: cst.Decorator) -> None:
        deco = node.decorator
        func = deco.func if isinstance(deco, cst.Call) else deco
        name = self.qname_in(func, CUSTOM_AUTOGRAD_CUDA)
        dtype = self.device_type(node)
        if name is not None:
            target = self.torch_text(CUSTOM_AUTOGRAD_CUDA[name])

            def transform(updated: cst.CSTNode) -> cst.CSTNode:
                assert isinstance(updated, cst.Decorator)
                rest = "".join(code(a) for a in updated.decorator.args) if isinstance(updated.decorator, cst.Call) else ""
                return updated.with_changes(decorator=expr(f"{target}(device_type={dtype}{', ' + rest if rest else ''})"))

            self.hit(node, f"{name} is CUDA-only", category="auto", transform=transform,
                     suggestion=f"@{target}(device_type={dtype})", needs_device=True)
            return
        if isinstance(deco, cst.Call) and self.qname_in(deco.func, _GENERIC):
            arg = kwarg(deco, "device_type")
            if arg is not None and cuda_device_string(arg.value)[0]:
                self.hit(arg.value, 'custom_fwd(device_type="cuda")', category="auto", suggestion=dtype,
                         transform=lambda updated: expr(dtype), needs_device=True)


RULE = CustomFwd
