"""Removing imports our rewrite made unused, without a metadata pass.

Only import aliases bound by statements the rewritten nodes referenced are candidates; one is
removed when its bound name no longer appears anywhere in the module (as a name, an attribute
name or an identifier-like string such as an ``__all__`` entry), which is conservative.
"""

from __future__ import annotations

import re

import libcst as cst
from libcst.codemod import CodemodContext
from libcst.codemod.visitors import AddImportsVisitor

from tools.codemods.nodes import code, string_value

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _as_name(alias: cst.ImportAlias, default: str) -> str:
    """The name ``import x as NAME`` binds (an import's ``as`` target is always a plain name)."""
    if alias.asname is None:
        return default
    target = alias.asname.name
    return target.value if isinstance(target, cst.Name) else code(target)


def bound_names(stmt: cst.Import | cst.ImportFrom) -> list[tuple[str, str]]:
    """(imported dotted name, name bound in the module) for each alias."""
    out: list[tuple[str, str]] = []
    if isinstance(stmt, cst.ImportFrom):
        if isinstance(stmt.names, cst.ImportStar):
            return []
        for alias in stmt.names:
            name = code(alias.name)
            out.append((name, _as_name(alias, name)))
    else:
        for alias in stmt.names:
            name = code(alias.name)
            out.append((name, _as_name(alias, name.split(".")[0])))
    return out


class _UsedNames(cst.CSTVisitor):
    def __init__(self) -> None:
        super().__init__()
        self.used: set[str] = set()

    def visit_Import(self, node: cst.Import) -> bool:
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        return False

    def visit_Name(self, node: cst.Name) -> None:
        self.used.add(node.value)

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        node.value.visit(self)  # ``x.autocast``: the attribute name binds nothing
        return False

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        value = string_value(node)
        if value is not None and _IDENT.match(value):
            self.used.add(value)


class _Remove(cst.CSTTransformer):
    def __init__(self, keys: set[str], unused: set[str]) -> None:
        super().__init__()
        self.keys = keys  # code of candidate import statements
        self.unused = unused

    def _filter(self, original: cst.Import | cst.ImportFrom,
                updated: cst.Import | cst.ImportFrom) -> cst.Import | cst.ImportFrom | cst.RemovalSentinel:
        if code(original) not in self.keys or isinstance(updated.names, cst.ImportStar):
            return updated
        # bound_names has one entry per alias, in order
        kept = [a for a, (_, bound) in zip(updated.names, bound_names(updated), strict=True)
                if bound not in self.unused]
        if len(kept) == len(updated.names):
            return updated
        if not kept:
            return cst.RemoveFromParent()
        kept[-1] = kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        return updated.with_changes(names=kept)

    def leave_Import(self, original_node: cst.Import,
                     updated_node: cst.Import) -> cst.Import | cst.ImportFrom | cst.RemovalSentinel:
        return self._filter(original_node, updated_node)

    def leave_ImportFrom(self, original_node: cst.ImportFrom,
                         updated_node: cst.ImportFrom) -> cst.Import | cst.ImportFrom | cst.RemovalSentinel:
        return self._filter(original_node, updated_node)

    def leave_SimpleStatementLine(
            self, original_node: cst.SimpleStatementLine,
            updated_node: cst.SimpleStatementLine) -> cst.SimpleStatementLine | cst.RemovalSentinel:
        if not updated_node.body:
            return cst.RemoveFromParent()
        return updated_node


def remove_unused(module: cst.Module, candidates: list[cst.Import | cst.ImportFrom]) -> cst.Module:
    if not candidates:
        return module
    finder = _UsedNames()
    module.visit(finder)
    unused = {bound for stmt in candidates for _, bound in bound_names(stmt) if bound not in finder.used}
    if not unused:
        return module
    return module.visit(_Remove({code(c) for c in candidates}, unused))


def _is_import_line(stmt: cst.BaseStatement) -> bool:
    return (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1
            and isinstance(stmt.body[0], (cst.Import, cst.ImportFrom)))


def _is_preamble(stmt: cst.BaseStatement) -> bool:
    """A module docstring or ``__strict__`` flag, which new imports go after (as libcst decides it)."""
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return False
    first = stmt.body[0]
    if isinstance(first, cst.Expr) and isinstance(first.value, cst.SimpleString):
        return True
    return (isinstance(first, cst.Assign) and len(first.targets) == 1
            and isinstance(first.targets[0].target, cst.Name) and first.targets[0].target.value == "__strict__")


def add_needed_imports(module: cst.Module, context: CodemodContext) -> cst.Module:
    """libcst's ``AddImportsVisitor`` for the imports recorded in ``context``, run on the module's
    head only: the preamble, the leading import block and the first statement after it (which may
    get a blank line before it). That is all the visitor reads or changes, and running it on the
    whole module would copy and rebuild every node of it."""
    body = list(module.body)
    i = 1 if body and _is_preamble(body[0]) else 0
    while i < len(body) and _is_import_line(body[i]):
        i += 1
    cut = min(len(body), i + 1)
    head = AddImportsVisitor(context).transform_module(module.with_changes(body=body[:cut]))
    return module.with_changes(body=[*head.body, *body[cut:]])
