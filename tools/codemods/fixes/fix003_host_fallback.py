"""FIX003 (ops.host-fallback): an op the device does not run -> run it on the host explicitly, move
the result back."""

from __future__ import annotations

import functools

import libcst as cst

from tools.codemods.fixes.base import Fix, FixResult, apply
from tools.codemods.nodes import atom, method_call, positional


def _to_device_of(value: cst.BaseExpression, like: cst.BaseExpression) -> cst.Call:
    """``value.to(like.device)``."""
    return method_call(value, "to", [cst.Arg(cst.Attribute(value=atom(like), attr=cst.Name("device")))])


class HostFallback(Fix):
    ID = "FIX003"
    NAME = "ops.host-fallback"
    DESCRIPTION = ("An op the device refuses (strict mode) at a line -> the same op on the host, the result moved "
                   "back: x.op(...) -> x.cpu().op(...).to(x.device); torch.op(a, b, ...) -> "
                   "(torch.op(a.cpu(), ...)).to(a.device) with the op's leading tensor arguments on the host (the "
                   "innermost such call covering the line; operands that are expressions are parenthesised).")

    def __init__(self, line: int, op: str, arg_count: int = 1) -> None:
        super().__init__()
        self.line = line
        self.op = op
        self.arg_count = arg_count

    def plan(self, module: cst.Module) -> None:
        for call in self.calls_covering(module, self.line):
            func = call.func
            if not isinstance(func, cst.Attribute) or func.attr.value != self.op:
                continue
            if self.qname_in(func, {f"torch.{self.op}"}) is not None:  # torch.op(a, b, ...)
                args = positional(call)
                if not args:
                    self.warn(f"torch.{self.op} at line {self.line} has no positional tensor argument")
                    return
                first = args[0].value
                moved = {id(a) for a in args[: min(self.arg_count, len(args))]}

                self.edit(call, functools.partial(_on_host_call, first, moved, tuple(call.args)))
                return
            receiver = func.value  # x.op(...): x.cpu().op(...).to(x.device)
            self.edit(call, functools.partial(_on_host_method, receiver))
            return


def _on_host_call(first: cst.BaseExpression, moved: set[int], originals: tuple[cst.Arg, ...],
                  updated: cst.Call) -> cst.BaseExpression:
    """``torch.op(a, b, ...)`` -> ``(torch.op(a.cpu(), ...)).to(a.device)`` (the arguments in ``moved``,
    by the identity of the original call's, on the host)."""
    new_args = [a.with_changes(value=method_call(a.value, "cpu")) if id(o) in moved else a
                for a, o in zip(updated.args, originals, strict=True)]
    inner = updated.with_changes(args=new_args)
    if not inner.lpar:
        inner = inner.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    return _to_device_of(inner, first)


def _on_host_method(receiver: cst.BaseExpression, updated: cst.Call) -> cst.BaseExpression:
    """``x.op(...)`` -> ``x.cpu().op(...).to(x.device)``."""
    assert isinstance(updated.func, cst.Attribute)
    on_host = updated.with_changes(func=updated.func.with_changes(value=method_call(updated.func.value, "cpu")))
    return _to_device_of(on_host, receiver)


def host_fallback(source: str, line: int, op: str, *, arg_count: int = 1,
                  filename: str = "<source>") -> FixResult | None:
    """The op ``op`` called at ``line`` run on the host (its first ``arg_count`` tensor arguments
    moved there), the result moved back to the device."""
    return apply(HostFallback(line, op, arg_count), source, filename)


FIX = HostFallback
