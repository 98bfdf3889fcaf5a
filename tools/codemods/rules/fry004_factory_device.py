"""FRY004 (placement.factory-device): device="cuda" in factories and set_default_device("cuda") -> the
device variable."""

from __future__ import annotations

import libcst as cst

from tools.codemods.base import CodemodRule, Transform
from tools.codemods.nodes import cuda_device_string, expr, positional
from tools.codemods.tables import DEVICE_OBJECT, DEVICE_TYPE_CALLS, SET_DEFAULT_DEVICE

_SKIP = DEVICE_TYPE_CALLS | DEVICE_OBJECT


def _replace_with(text: str) -> Transform:
    return lambda updated: expr(text)


class FactoryDevice(CodemodRule):
    ID = "FRY004"
    NAME = "placement.factory-device"
    DESCRIPTION = ('device="cuda" keyword arguments (zeros, randn, arange, tensor, Generator, ...) and '
                   'torch.set_default_device("cuda") -> the device variable.')
    CATEGORY = "auto"
    ENTRIES = (4,)

    def visit_Call(self, node: cst.Call) -> None:
        if self.qname_in(node.func, _SKIP) is not None:
            return
        targets = [a for a in node.args if a.keyword is not None and a.keyword.value == "device"]
        if self.qname_in(node.func, SET_DEFAULT_DEVICE) is not None:
            targets += positional(node)[:1]
        for arg in targets:
            is_cuda, ordinal = cuda_device_string(arg.value)
            if not is_cuda:
                continue
            if ordinal not in (None, 0):
                self.hit(arg.value, f"device on CUDA ordinal {ordinal}", category="review",
                         suggestion=f"torch.device({self.dev}.type, {ordinal})")
                continue
            ref = self.device_ref(arg.value)
            self.hit(arg.value, 'device="cuda" creates the tensor on CUDA', category="auto", suggestion=ref,
                     needs_device=True, transform=_replace_with(ref))


RULE = FactoryDevice
