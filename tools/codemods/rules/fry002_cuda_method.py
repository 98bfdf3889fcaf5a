"""FRY002 (placement.cuda-method): x.cuda(), module.cuda(), .cuda(non_blocking=True) -> .to(device, ...)."""

from __future__ import annotations

import libcst as cst

from tools.codemods.base import CodemodRule
from tools.codemods.device_indices import left_to_index_rule
from tools.codemods.nodes import code, cuda_call_to, int_value, kwarg, positional


class CudaMethod(CodemodRule):
    ID = "FRY002"
    NAME = "placement.cuda-method"
    DESCRIPTION = ("x.cuda(), module.cuda(), x.cuda(0), .cuda(non_blocking=True) -> .to(device, ...); "
                   ".cuda(i) with another ordinal -> review.")
    CATEGORY = "auto"
    ENTRIES = (2,)

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if not isinstance(func, cst.Attribute) or func.attr.value != "cuda":
            return
        if any(q.startswith("torch.cuda") or q == "torch" for q in self.qnames(func.value)):
            return
        pos = positional(node)
        dev_arg = kwarg(node, "device")
        index = pos[0] if pos else dev_arg
        extra = [a for a in node.args if a is not index and not (a.keyword and a.keyword.value == "non_blocking")]
        if extra or len(pos) > 1:
            self.hit(node, ".cuda() with arguments Ferry cannot map", category="review",
                     suggestion=f"{code(func.value)}.to({self.dev})")
            return
        if index is not None and int_value(index.value) is None and left_to_index_rule(index.value, self.ctx,
                                                                                    device_only=True):
            return  # an index held in a variable (.cuda(local_rank)): FRY055
        if index is not None and int_value(index.value) != 0:
            self.hit(node, f".cuda({code(index.value)}): a specific CUDA ordinal", category="review",
                     suggestion=f"{code(func.value)}.to({self.dev})  # or torch.device({self.dev}.type, index)")
            return
        ref = self.device_ref(node)

        def transform(updated: cst.CSTNode) -> cst.CSTNode:
            return cuda_call_to(updated, ref)

        self.hit(node, ".cuda() moves to a CUDA device", category="auto", suggestion=f".to({ref})",
                 transform=transform, needs_device=True)


RULE = CudaMethod
