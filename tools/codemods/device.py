"""The module's device variable: find one to reuse, or build and insert one."""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass

import libcst as cst
from libcst.metadata import GlobalScope, Scope

from tools.codemods.nodes import code, cuda_device_string, dotted, header_length
from tools.codemods.targets import DEVICE_EXPRESSIONS, DEVICE_STRING_EXPRESSIONS, DeviceMode, device_expression

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
    #: the variable holds a device *string* ("cuda", the accelerator's type name), not a torch.device
    is_string: bool = False


def _norm(text: str) -> str:
    return _WS.sub("", text).replace("'", '"')


_CANONICAL = {_norm(v) for v in DEVICE_EXPRESSIONS.values()}
_CANONICAL_STRING = {_norm(v) for v in DEVICE_STRING_EXPRESSIONS.values()}
_ORDINAL_SUFFIX = re.compile(r'^\((.*)\)\+":\d+"$|^"tpx:\d+"$')


def _is_string_definition(norm: str) -> bool:
    """Ferry's string form of the device (``device_string_expression``), with or without an index."""
    if norm in _CANONICAL_STRING:
        return True
    m = _ORDINAL_SUFFIX.match(norm)
    return m is not None and (m.group(1) is None or m.group(1) in _CANONICAL_STRING)


def is_cuda_device_string_value(node: cst.BaseExpression) -> bool:
    """``"cuda"``/``"cuda:0"`` or ``"cuda" if torch.cuda.is_available() else "cpu"``: a device held as a string."""
    if cuda_device_string(node)[0]:
        return True
    return (isinstance(node, cst.IfExp) and cuda_device_string(node.body)[0]
            and isinstance(node.orelse, cst.SimpleString) and "is_available" in code(node.test))


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


def module_binds(module: cst.Module, name: str) -> bool:
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
        if isinstance(target, cst.Name):
            norm = _norm(code(value)).replace(alias + ".", "torch.")
            if norm in _CANONICAL:
                return DeviceInfo(target.value, defined=True)
            if _is_string_definition(norm):
                return DeviceInfo(target.value, defined=True, is_string=True)
    for target, value in _module_assignments(module):
        if isinstance(target, cst.Name) and is_cuda_device_value(value):
            return DeviceInfo(target.value, definition_value=value, is_string=is_cuda_device_string_value(value))
    name = DEFAULT_NAME if not module_binds(module, DEFAULT_NAME) else FALLBACK_NAME
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


def insert_definitions(module: cst.Module, definitions: Mapping[str, str], after: int = 0) -> cst.Module:
    """Insert each ``name -> source`` definition the module does not bind yet after the leading
    docstring/import block and ``after`` more statements (the device variable just inserted)."""
    stmts = [cst.parse_statement(source).with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine()])
             for name, source in definitions.items() if not module_binds(module, name)]
    if not stmts:
        return module
    index = min(header_length(module) + after, len(module.body))
    body = list(module.body)
    body[index:index] = stmts
    after_last = index + len(stmts)
    if after_last < len(body):  # two blank lines after a definition, as before it
        lines = body[after_last].leading_lines
        blank = next((i for i, line in enumerate(lines) if line.comment is not None), len(lines))
        if blank < 2:
            body[after_last] = body[after_last].with_changes(
                leading_lines=[*[cst.EmptyLine()] * (2 - blank), *lines])
    return module.with_changes(body=body)


def _binds_a_cuda_device(assignment_node: cst.CSTNode, parents: Mapping[cst.CSTNode, cst.CSTNode]) -> bool:
    """A local ``NAME = <cuda device object>`` (rewritten to the device expression itself): naming NAME after
    it is safe. A device *string* is not (it stays a string, and has no ``.type``)."""
    parent = parents.get(assignment_node)
    value: cst.BaseExpression | None = None
    if isinstance(parent, cst.AssignTarget):
        parent = parents.get(parent)
        if isinstance(parent, cst.Assign) and len(parent.targets) == 1:
            value = parent.value
    elif isinstance(parent, cst.AnnAssign) and parent.target is assignment_node:
        value = parent.value
    return value is not None and is_cuda_device_value(value) and not is_cuda_device_string_value(value)


def unsafe_scopes(scopes: Mapping[cst.CSTNode, Scope | None], parents: Mapping[cst.CSTNode, cst.CSTNode],
                  name: str) -> frozenset[Scope]:
    """The non-module scopes (functions, lambdas, classes, comprehensions) that bind ``name`` to something
    other than a CUDA device (a parameter, ``device = x.device``, a loop target): there ``name`` is
    the local binding, and a reference to the module-level variable inserted or reused under that name
    reads the local one (``UnboundLocalError`` before its assignment)."""
    found: set[Scope] = set()
    for scope in {s for s in scopes.values() if s is not None}:
        if isinstance(scope, GlobalScope) or name not in scope.assignments:
            continue
        for assignment in scope.assignments[name]:
            node = getattr(assignment, "node", None)
            if node is None or not _binds_a_cuda_device(node, parents):
                found.add(scope)
                break
    return frozenset(found)
