"""FRY026 (amp.custom-fwd): @torch.cuda.amp.custom_fwd/custom_bwd -> @torch.amp.custom_fwd(device_type=device.type)."""

from __future__ import annotations

import libcst as cst

from tools.codemods.base import CodemodRule
from tools.codemods.nodes import args_after, expr, kwarg
from tools.codemods.tables import CUSTOM_AUTOGRAD_CUDA

_GENERIC = frozenset(CUSTOM_AUTOGRAD_CUDA.values())


class CustomFwd(CodemodRule):
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
                args = updated.decorator.args if isinstance(updated.decorator, cst.Call) else ()
                return updated.with_changes(decorator=expr(f"{target}({args_after(f'device_type={dtype}', args)})"))

            self.hit(node, f"{name} is CUDA-only", category="auto", transform=transform,
                     suggestion=f"@{target}(device_type={dtype})", needs_device=True)
            return
        if isinstance(deco, cst.Call) and self.qname_in(deco.func, _GENERIC):
            self.cuda_device_type_arg(node, kwarg(deco, "device_type"), 'custom_fwd(device_type="cuda")')


RULE = CustomFwd
