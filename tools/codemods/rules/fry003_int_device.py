"""FRY003 (placement.int-device): x.to(0) meaning CUDA ordinal 0 -> x.to(device)."""

from __future__ import annotations

import libcst as cst

from tools.codemods.base import CodemodRule
from tools.codemods.device_indices import RANK_NAME, left_to_index_rule
from tools.codemods.nodes import code, expr, int_value, kwarg, positional


class IntDevice(CodemodRule):
    ID = "FRY003"
    NAME = "placement.int-device"
    DESCRIPTION = (".to(0) / .to(device=0) (an integer means a CUDA ordinal) -> .to(device); .to(local_rank)-style "
                   "ordinals -> review.")
    CATEGORY = "auto"
    ENTRIES = (3,)
    # purely syntactic: no scopes or qualified names needed, which keeps torch files without CUDA cheap
    METADATA_DEPENDENCIES = ()

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if not isinstance(func, cst.Attribute) or func.attr.value != "to":
            return
        pos = positional(node)
        arg = pos[0] if pos else kwarg(node, "device")
        if arg is None:
            return
        value = int_value(arg.value)
        if value is None:
            name = code(arg.value)
            if isinstance(arg.value, (cst.Name, cst.Attribute)) and RANK_NAME.search(name.split(".")[-1]):
                if left_to_index_rule(arg.value, self.ctx, device_only=arg.keyword is not None):
                    return  # an integer the module binds, or device=local_rank: FRY055
                self.hit(node, f".to({name}): an integer ordinal means a CUDA device", category="review",
                         suggestion=f".to(torch.device({self.dev}.type, {name}))")
            return
        if value != 0:
            self.hit(node, f".to({value}): CUDA ordinal {value}", category="review",
                     suggestion=f".to(torch.device({self.dev}.type, {value}))")
            return
        ref = self.device_ref(node)
        self.hit(arg.value, ".to(0) means CUDA device 0", category="auto", suggestion=ref, needs_device=True,
                 transform=lambda updated: expr(ref))


RULE = IntDevice
