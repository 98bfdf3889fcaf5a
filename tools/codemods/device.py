"""The module's device variable: find one to reuse, or build and insert one."""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator
from dataclasses import dataclass

import libcst as cst

from tools.codemods.nodes import code, cuda_device_string, dotted, header_length
from tools.codemods.targets import DEVICE_EXPRESSIONS, DeviceMode, device_expression

DEFAULT_NAME = "device"
FALLBACK_NAME = "ferry_device"
_WS = re.compile(r"\s+")


@dataclass
class DeviceInfo:
    name: str
    defined: bool = False
    definition_value: cst.CSTNode | None = None
    definition_used: bool = False
    torch_name: str | None = None


def _norm(text: str) -> str:
    return _WS.sub("", text).replace("'", '"')


_CANONICAL = {_norm(v) for v in DEVICE_EXPRESSIONS.values()}


def is_cuda_device_value(node: cst.BaseExpression) -> bool:
    """Syntactic test for the right-hand side of ``NAME = <cuda device>`` at module level."""
    if cuda_device_string(node)[0]:
        return True
    if isinstance(node, cst.Call) and dotted(node.func) in ("torch.device", "device") and node.args:
        first = node.args[0].value
        if len(node.args) > 2 or (len(node.args) == 2 and code(node.args[1].value).strip() != "0"):
            return False  # torch.device("cuda", local_rank): a per-rank device, not the module's device
        return cuda_device_string(first)[0] or (isinstance(first, cst.IfExp) and is_cuda_device_value(first))
    if isinstance(node, cst.IfExp):
        return is_cuda_device_value(node.body) and "is_available" in code(node.test)
    return False


def _module_assignments(module: cst.Module) -> Iterator[tuple[cst.BaseAssignTargetExpression, cst.BaseExpression]]:
    """(target, value) of each single-target assignment at the module's top level."""
    for stmt in module.body:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, cst.Assign) and len(small.targets) == 1:
                    yield small.targets[0].target, small.value
                elif isinstance(small, cst.AnnAssign) and small.value is not None:
                    yield small.target, small.value


def _module_binds(module: cst.Module, name: str) -> bool:
    for stmt in module.body:
        if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)) and stmt.name.value == name:
            return True
    for target, _ in _module_assignments(module):
        if isinstance(target, cst.Name) and target.value == name:
            return True
    for stmt in module.body:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, (cst.Import, cst.ImportFrom)) and not isinstance(small.names, cst.ImportStar):
                    for alias in small.names:
                        bound = alias.asname.name if alias.asname else alias.name
                        if isinstance(bound, cst.Name) and bound.value == name:
                            return True
    return False


def torch_alias(module: cst.Module) -> str | None:
    """The name ``import torch [as X]`` binds at module level, or None."""
    for stmt in module.body:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, cst.Import):
                    for alias in small.names:
                        if code(alias.name) == "torch":
                            return alias.asname.name.value if alias.asname else "torch"  # type: ignore[union-attr]
    return None


def find_device_variable(module: cst.Module, mode: DeviceMode) -> DeviceInfo:
    alias = torch_alias(module) or "torch"
    for target, value in _module_assignments(module):
        if isinstance(target, cst.Name) and _norm(code(value)).replace(alias + ".", "torch.") in _CANONICAL:
            return DeviceInfo(target.value, defined=True)
    for target, value in _module_assignments(module):
        if isinstance(target, cst.Name) and is_cuda_device_value(value):
            return DeviceInfo(target.value, definition_value=value)
    name = DEFAULT_NAME if not _module_binds(module, DEFAULT_NAME) else FALLBACK_NAME
    return DeviceInfo(name)


def usable_device_variable(module: cst.Module, mode: DeviceMode, local_names: Collection[str] = ()) -> str | None:
    """The device variable that code added at a site can name, or None when there is none to use.

    ``local_names`` are the names bound where the site is (the enclosing function's assignments and
    parameters). A ``device`` bound there comes first; then the module's device variable as
    :func:`find_device_variable` finds it when the module defines it (Ferry's definition, under any
    name) and the site does not rebind that name; then a module-level ``device = ...`` of the user's.
    """
    if DEFAULT_NAME in local_names:
        return DEFAULT_NAME
    info = find_device_variable(module, mode)
    if info.defined and info.name not in local_names:
        return info.name
    if any(isinstance(t, cst.Name) and t.value == DEFAULT_NAME for t, _ in _module_assignments(module)):
        return DEFAULT_NAME
    return None


def insert_device_definition(module: cst.Module, name: str, mode: DeviceMode,
                             alias: str = "torch") -> cst.Module:
    """Insert ``NAME = <device expression>`` right after the leading docstring/import block."""
    index = header_length(module)
    text = device_expression(mode)
    if alias != "torch":
        text = text.replace("torch.", alias + ".")
    stmt = cst.parse_statement(f"{name} = {text}\n")
    body = list(module.body)
    if index > 0:
        stmt = stmt.with_changes(leading_lines=[cst.EmptyLine()])
    body.insert(index, stmt)
    return module.with_changes(body=body)
