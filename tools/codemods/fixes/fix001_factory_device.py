"""FIX001 (device.factory-device): mixed devices at a line -> ``device=`` on the factory that made the
host tensor."""

from __future__ import annotations

import libcst as cst

from tools.codemods.device import usable_device_variable
from tools.codemods.fixes.base import Fix, FixResult, apply, bound_values, names_in, nodes_of
from tools.codemods.nodes import add_kwarg, expr, kwarg
from tools.codemods.tables import DEVICE_FACTORIES

#: names that are never "the other operand" whose device the tensor should be created on
_NOT_TENSORS = frozenset({"torch", "self", "nn", "F", "np"})


class FactoryDevice(Fix):
    ID = "FIX001"
    NAME = "device.factory-device"
    DESCRIPTION = ("Mixed devices at a line: the torch factories called on that line without device= (any of "
                   "tools.codemods.tables.DEVICE_FACTORIES: zeros, arange, randperm, zeros_like, ...; not one inside "
                   "another's arguments), else those in the arguments of a call that starts on the line and goes on "
                   "below it, else the factory call that last assigned a name used on the line (earlier, in the same "
                   "function), get "
                   "device=<the device variable in scope (tools.codemods.device.usable_device_variable)>, else "
                   "device=<other operand>.device with the first tensor-like name on the line that the function "
                   "binds (not the factory's own arguments, not the name being assigned).")

    def __init__(self, line: int, mode: str = "accelerator") -> None:
        super().__init__()
        self.line = line
        self.mode = mode

    def _is_factory(self, call: cst.Call) -> bool:
        return self.qname_in(call.func, DEVICE_FACTORIES) is not None and kwarg(call, "device") is None

    def _outermost_factories(self, calls: list[cst.Call]) -> list[cst.Call]:
        found = [c for c in calls if self._is_factory(c)]
        inner = {id(n) for c in found for n in nodes_of(c, cst.Call) if n is not c}
        return [c for c in found if id(c) not in inner]

    def plan(self, module: cst.Module) -> None:
        calls = self.calls_covering(module, self.line)
        on_line = [n for n in names_in(module) if self.span(n).line == self.line]
        # 1. the factories called on the failing line itself (not those inside another one's arguments:
        # torch.full((3,), torch.tensor(2.0).item()) is the full)
        found = self._outermost_factories([c for c in calls if self.span(c).line == self.line])
        # 1b. else, of a call that starts on the line and goes on (a traceback names a call's first line),
        # the factories in its arguments on the lines below
        spanning = [c for c in calls if self.span(c).line == self.line < self.span(c).end_line]
        if not found and spanning:
            found = self._outermost_factories([c for c in nodes_of(spanning[-1], cst.Call) if c is not spanning[-1]])
        if found:
            for call in found:
                self._add_device(module, call, on_line, calls, skip=set())
            return
        # 2. a name used on the line, last assigned (before it, in the same function) from a factory
        if not on_line:
            return
        scope = self.function_scope(on_line[0])
        used = {n.value for n in on_line}
        candidates: list[tuple[int, str, cst.Call]] = []
        for assign in nodes_of(module, (cst.Assign, cst.AnnAssign)):
            value = assign.value
            if not isinstance(value, cst.Call) or self.span(assign).line >= self.line or not self._is_factory(value):
                continue
            if self.function_scope(assign) is not scope:
                continue
            targets = [t.target for t in assign.targets] if isinstance(assign, cst.Assign) else [assign.target]
            for target in targets:
                if isinstance(target, cst.Name) and target.value in used:
                    candidates.append((self.span(assign).line, target.value, value))
        if candidates:
            _, name, call = max(candidates, key=lambda c: c[0])
            self._add_device(module, call, on_line, calls, skip={name})

    def _add_device(self, module: cst.Module, call: cst.Call, on_line: list[cst.Name], calls: list[cst.Call],
                    skip: set[str]) -> None:
        dev = self._device_expr(module, call, on_line, calls, skip)
        if dev is None:
            self.warn(f"no device variable or device operand in scope at line {self.line}")
            return
        self.edit(call, lambda updated: add_kwarg(updated, "device", expr(dev)))

    def _device_expr(self, module: cst.Module, call: cst.Call, on_line: list[cst.Name], calls: list[cst.Call],
                     skip: set[str]) -> str | None:
        """The device variable in scope, else ``<other operand>.device`` from the failing line."""
        local = bound_values(self.function_scope(call))
        name = usable_device_variable(module, self.mode, local)  # type: ignore[arg-type]
        if name is not None:
            return name
        inputs = {id(n) for n in names_in(call)}  # the factory's own arguments are not the other operand
        targets = {id(t.target) for stmt in nodes_of(module, cst.Assign) for t in stmt.targets}
        targets |= {id(stmt.target) for stmt in nodes_of(module, cst.AnnAssign)}
        spanning = [n for c in calls for n in names_in(c) if self.span(n).line != self.line]
        for n in [*on_line, *spanning]:
            if id(n) in inputs or id(n) in targets or n.value in skip or n.value in _NOT_TENSORS:
                continue
            if n.value in local:
                return f"{n.value}.device"
        return None


def add_factory_device(source: str, line: int, *, mode: str = "accelerator",
                       filename: str = "<source>") -> FixResult | None:
    """``device=`` for the factory that made the host tensor in a mixed-device failure at ``line``."""
    return apply(FactoryDevice(line, mode), source, filename)


FIX = FactoryDevice
