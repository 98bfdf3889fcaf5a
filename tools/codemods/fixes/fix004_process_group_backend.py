"""FIX004 (dist.per-device-backend): a process group without a backend for the device -> one backend
per device type at ``init_process_group``."""

from __future__ import annotations

import libcst as cst

from tools.codemods.device import find_device_variable, usable_device_variable
from tools.codemods.fixes.base import Fix, FixResult, apply, nodes_of, torch_name
from tools.codemods.nodes import add_kwarg, code, dotted, expr, kwarg, positional

#: what an already fixed backend argument starts with
FIXED_MARK = "cpu:gloo,"


def backend_expression(device: str | None, torch: str = "torch") -> str:
    """``f"cpu:gloo,{dev}:{<dev's default backend, else gloo>}"`` for the device variable ``device``
    (the current accelerator's type when there is none)."""
    dev = f"{device}.type" if device else f"{torch}.accelerator.current_accelerator().type"
    return f'f"cpu:gloo,{{{dev}}}:{{{torch}.distributed.Backend.default_device_backend_map.get({dev}, \'gloo\')}}"'


class ProcessGroupBackend(Fix):
    ID = "FIX004"
    NAME = "dist.per-device-backend"
    DESCRIPTION = ('The first init_process_group(...) call gets backend=f"cpu:gloo,{device.type}:{<the device\'s '
                   'default backend, else gloo>}" (its backend= value or first positional argument replaced, or the '
                   "keyword added): CPU tensors and the accelerator's each get a backend (nccl on CUDA, gloo on tpx). "
                   "device is the module's device variable (tools.codemods.device; torch.device(device) when it "
                   "holds a device string), else the current accelerator. "
                   "Not applied when the backend already names one per device, or the module does not import torch.")

    def __init__(self, mode: str = "accelerator") -> None:
        super().__init__()
        self.mode = mode

    def plan(self, module: cst.Module) -> None:
        torch = torch_name(module)
        if torch is None:
            return
        call = next((c for c in nodes_of(module, cst.Call)
                     if (dotted(c.func) or "").split(".")[-1] == "init_process_group"), None)
        if call is None:
            return
        device = usable_device_variable(module, self.mode)  # type: ignore[arg-type]
        info = find_device_variable(module, self.mode)  # type: ignore[arg-type]
        if device is not None and info.name == device and info.is_string:
            device = f"{torch}.device({device})"  # a device string (catalogue 53) has no .type
        value = expr(backend_expression(device, torch))
        backend = kwarg(call, "backend")
        if backend is not None:
            if FIXED_MARK in code(backend.value):
                return
            self.edit(backend.value, lambda updated: value, site=self.span(call))
        elif positional(call):
            self.edit(positional(call)[0].value, lambda updated: value, site=self.span(call))
        else:
            self.edit(call, lambda updated: add_kwarg(updated, "backend", value))


def per_device_backend(source: str, *, mode: str = "accelerator", filename: str = "<source>") -> FixResult | None:
    """A backend per device type for the module's first ``init_process_group`` call."""
    return apply(ProcessGroupBackend(mode), source, filename)


FIX = ProcessGroupBackend
