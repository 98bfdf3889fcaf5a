"""FIX005 (cuda.device-generic-api): a CUDA API called at a line -> its device-generic equivalent,
at every call of it in the module."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

import libcst as cst

from tools.codemods.device import usable_device_variable
from tools.codemods.fixes.base import Fix, FixResult, apply, nodes_of, torch_name
from tools.codemods.nodes import add_kwarg, expr, kwarg

_TORCH_RE = re.compile(r"(?<![\w.])torch\.")


@dataclass(frozen=True)
class ApiReplacement:
    """``torch.cuda.Event`` -> ``torch.Event`` (``replace``), with ``device=<device>`` when ``device_kw``."""

    replace: str
    device_kw: bool = False


class DeviceGenericApi(Fix):
    ID = "FIX005"
    NAME = "cuda.device-generic-api"
    DESCRIPTION = ("A CUDA API called at a line (a key of the given table, e.g. torch.cuda.Event) -> its "
                   "device-generic replacement (torch.Event) at every call of that API in the module, with "
                   "device=<device> added where the table says so; <device> is the module's device variable "
                   "(tools.codemods.device), else torch.accelerator.current_accelerator(). Names resolve through "
                   "imports (import torch as T, from torch.cuda import Event); only in modules that import torch.")

    def __init__(self, line: int, table: Mapping[str, ApiReplacement], mode: str = "accelerator") -> None:
        super().__init__()
        self.line = line
        self.table = table
        self.mode = mode

    def plan(self, module: cst.Module) -> None:
        torch = torch_name(module)
        if torch is None:
            return
        name = next((n for c in self.calls_covering(module, self.line) if self.span(c).line == self.line
                     for n in [self.qname_in(c.func, self.table)] if n is not None), None)
        if name is None:
            return
        spec = self.table[name]
        alias = (lambda text: _TORCH_RE.sub(torch + ".", text)) if torch != "torch" else (lambda text: text)
        replacement = alias(spec.replace)
        device = usable_device_variable(module, self.mode)  # type: ignore[arg-type]
        dev = device if device is not None else alias("torch.accelerator.current_accelerator()")
        for call in nodes_of(module, cst.Call):
            if self.qname_in(call.func, {name}) is None:
                continue
            add_device = spec.device_kw and kwarg(call, "device") is None

            def rewrite(updated: cst.Call, add_device: bool = add_device) -> cst.Call:
                updated = updated.with_changes(func=expr(replacement))
                return add_kwarg(updated, "device", expr(dev)) if add_device else updated

            self.edit(call, rewrite)


def device_generic_api(source: str, line: int, table: Mapping[str, ApiReplacement], *, mode: str = "accelerator",
                       filename: str = "<source>") -> FixResult | None:
    """The CUDA API of ``table`` called at ``line`` replaced by its device-generic equivalent everywhere
    in the module."""
    return apply(DeviceGenericApi(line, table, mode), source, filename)


FIX = DeviceGenericApi
