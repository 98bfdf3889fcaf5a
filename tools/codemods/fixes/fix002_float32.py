"""FIX002 (dtype.float32): float64 at a line (tpx has none) -> float32 there."""

from __future__ import annotations

import libcst as cst

from tools.codemods.fixes.base import Fix, FixResult, apply, nodes_of, torch_name
from tools.codemods.nodes import add_kwarg, code, expr, kwarg, method_call, positional

FLOAT64 = frozenset({"torch.float64", "torch.double"})
MOVE_METHODS = frozenset({"to", "cuda", "tpx"})
HOST_CONSTRUCTORS = frozenset({"torch.from_numpy", "torch.tensor", "torch.as_tensor"})
#: factories whose result has the default floating dtype (float64 under torch.set_default_dtype(torch.float64));
#: not arange/full/*_like, whose dtype follows their arguments
DEFAULT_DTYPE_FACTORIES = frozenset({"torch.eye", "torch.zeros", "torch.ones", "torch.empty", "torch.rand",
                                     "torch.randn", "torch.linspace", "torch.logspace"})


class Float32(Fix):
    ID = "FIX002"
    NAME = "dtype.float32"
    DESCRIPTION = ("float64 at a line -> float32 there: torch.float64/torch.double -> torch.float32 and .double() -> "
                   ".float() on that line; else each tensor moved to the device there is cast while moving "
                   "(.to(dev) -> .to(dev, dtype=torch.float32), .cuda()/.tpx() -> .cuda().float()); else a tensor "
                   "made from host data there is made float32 (torch.tensor/as_tensor(..., dtype=torch.float32), "
                   "torch.from_numpy(...).float()); else a factory placed on a device there with no dtype= (float64 "
                   "by torch.set_default_dtype(torch.float64): eye, zeros, ones, empty, rand, randn, linspace, "
                   "logspace) gets dtype=torch.float32. Only in modules that import torch.")
    DTYPE_CHANGES = (("float64", "float32"),)

    def __init__(self, line: int) -> None:
        super().__init__()
        self.line = line

    def plan(self, module: cst.Module) -> None:
        torch = torch_name(module)
        if torch is None:
            return
        # 1. explicit float64 dtypes / .double() at the site
        for node in nodes_of(module, cst.Attribute):
            if self.span(node).line == self.line and self.qname_in(node, FLOAT64) is not None:
                self.edit(node, lambda updated: updated.with_changes(attr=cst.Name("float32")))
        for call in nodes_of(module, cst.Call):
            func = call.func
            if isinstance(func, cst.Attribute) and func.attr.value == "double" and not call.args \
                    and self.span(func.attr).line == self.line:
                self.edit(func.attr, lambda updated: updated.with_changes(value="float"))
        if self.sites:
            return
        float32 = f"{torch}.float32"
        calls = self.calls_covering(module, self.line)
        # 2. host float64 tensors moved to the device: cast each one while moving (a line may move
        #    several, `f(x.to(d), y.to(d))`: one fix per failing line, or the second stays float64)
        for call in calls:
            func = call.func
            if not (isinstance(func, cst.Attribute) and func.attr.value in MOVE_METHODS
                    and self.span(call).line == self.line):
                continue
            if func.attr.value == "to":
                if kwarg(call, "dtype") is None and not any(
                        "dtype" in code(a.value) or "float" in code(a.value) for a in positional(call)):
                    self.edit(call, lambda updated: add_kwarg(updated, "dtype", expr(float32)))
                continue
            self.edit(call, lambda updated: method_call(updated, "float"))
        if self.sites:
            return
        # 3. a tensor made from host data at the site: make it float32
        for call in calls:
            name = self.qname_in(call.func, HOST_CONSTRUCTORS)
            if name is None or self.span(call).line != self.line:
                continue
            if name != "torch.from_numpy" and kwarg(call, "dtype") is None:
                self.edit(call, lambda updated: add_kwarg(updated, "dtype", expr(float32)))
            else:
                self.edit(call, lambda updated: method_call(updated, "float"))
            return
        # 4. a factory placed on a device with the default dtype (float64 by set_default_dtype): float32
        for call in calls:
            if (self.span(call).line == self.line and self.qname_in(call.func, DEFAULT_DTYPE_FACTORIES)
                    and kwarg(call, "device") is not None and kwarg(call, "dtype") is None):
                self.edit(call, lambda updated: add_kwarg(updated, "dtype", expr(float32)))
                return


def float32_at(source: str, line: int, *, filename: str = "<source>") -> FixResult | None:
    """float64 -> float32 at ``line``."""
    return apply(Float32(line), source, filename)


FIX = Float32
