"""FRY061 (placement.device-string-argument): "cuda" handed to code as an argument or in a list of devices
-> the accelerator's type string.

Tests call the repository's own functions with the device by name (``grid(nx, "cuda")``,
``laplacian(n, dx, "cuda")``) and parametrise over devices (``@pytest.mark.parametrize("device",
["cpu", "cuda"])``); the callee then builds tensors on CUDA, which fails on every other accelerator.
The literal becomes the string FRY001 writes for a device held as a string (catalogue 53): the
accelerator's type name, "cuda" on CUDA, "tpx" on tpx, "cpu" without an accelerator, so the code means
what it meant on CUDA and keeps running on the CPU. Text handling (``print("cuda")``,
``getattr(torch, "cuda")``, ``name.replace("cuda", ...)``) and lists that are not devices beside "cpu"
are left alone.
"""

from __future__ import annotations

import libcst as cst

from tools.codemods.base import CodemodRule
from tools.codemods.device_strings import argument_literal
from tools.codemods.nodes import cuda_device_string
from tools.codemods.tables import DEVICE_OBJECT, DEVICE_TYPE_CALLS, INIT_PROCESS_GROUP, SET_DEFAULT_DEVICE

#: calls whose "cuda" argument other rules handle (as FRY001 leaves them)
_OTHER_RULES_CALLS = DEVICE_OBJECT | DEVICE_TYPE_CALLS | SET_DEFAULT_DEVICE | INIT_PROCESS_GROUP


class DeviceStringArgument(CodemodRule):
    ID = "FRY061"
    NAME = "placement.device-string-argument"
    DESCRIPTION = ('"cuda"/"cuda:0" passed as a positional argument (grid(nx, "cuda"), pytest.param("cuda")) or a '
                   'device-like keyword other rules do not own (target_device="cuda"), and "cuda" in a list or '
                   'tuple of device names beside "cpu" (@pytest.mark.parametrize("device", ["cpu", "cuda"])) -> '
                   'the accelerator\'s type string, as FRY001 writes it (catalogue 53: a string stays a string). '
                   'Left alone: text handling (print, getattr, str methods, logging, pytest.skip), .to("cuda") '
                   '(FRY001), device= (FRY004), map_location= (FRY005), option defaults and choices=, torch.device '
                   'and device-type calls, other ordinals (FRY001 review).')
    CATEGORY = "auto"
    ENTRIES = (1,)

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        parent = self.parent(node)
        if not argument_literal(node, parent, self.parent):
            return
        if isinstance(parent, cst.Arg):
            call = self.parent(parent)
            if isinstance(call, cst.Call) and self.qname_in(call.func, _OTHER_RULES_CALLS) is not None:
                return
            message = "a CUDA device string handed to code as an argument"
        else:
            message = "CUDA in a list of devices beside the CPU"
        self.string_device_hit(node, message, cuda_device_string(node)[1])


RULE = DeviceStringArgument
