"""Removing imports our rewrite made unused, without a metadata pass.

Only import aliases bound by statements the rewritten nodes referenced are candidates; one is
removed when its bound name no longer appears anywhere in the module (as a name, an attribute
name or an identifier-like string such as an ``__all__`` entry), which is conservative.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import libcst as cst

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


def add_needed_imports(module: cst.Module, needed: Sequence[tuple[str, str | None]]) -> cst.Module:
    """The module with the imports ``needed`` ((module, None): ``import module``) that its leading import
    block lacks, exactly as libcst's ``AddImportsVisitor`` adds them: after the preamble and the leading
    import block, sorted, the statement after them given a blank line before it; an ``import M`` already
    in that block (without ``as``) is kept as it is. What the rules ask for is ``import M`` only; a pair
    that names an object (``from M import O``, merged into an existing ``from M import``) goes through
    the visitor itself, whose import pulls in ``libcst.matchers`` (a fifth of a second of the scan's
    start, on the way to the first target run)."""
    if any(obj is not None for _, obj in needed):
        return _with_visitor(module, needed)
    body = list(module.body)
    start, end = _leading_imports(body)
    have = {alias.evaluated_name for stmt in body[start:end] for alias in _plain_imports(stmt)}
    missing = sorted({mod for mod, _ in needed} - have)
    if not missing:
        return module
    added = [cst.parse_statement(f"import {name}", config=module.config_for_parsing) for name in missing]
    after = body[end:]
    if after:
        after[0] = _blank_line_before(after[0])
    return module.with_changes(body=[*body[:end], *added, *after])


def _leading_imports(body: list[cst.SimpleStatementLine | cst.BaseCompoundStatement]) -> tuple[int, int]:
    """Where the module's leading import block starts (after a docstring or ``__strict__`` flag) and ends:
    the statements libcst's ``AddImportsVisitor`` reads and adds after."""
    start = 1 if body and _is_preamble(body[0]) else 0
    end = start
    while end < len(body) and _is_import_line(body[end]):
        end += 1
    return start, end


def _plain_imports(stmt: cst.BaseStatement) -> list[cst.ImportAlias]:
    """The names of an ``import a.b, c`` line bound without ``as``."""
    assert isinstance(stmt, cst.SimpleStatementLine)
    imp = stmt.body[0]
    return [a for a in imp.names if a.asname is None] if isinstance(imp, cst.Import) else []


def _blank_line_before(stmt: cst.SimpleStatementLine | cst.BaseCompoundStatement,
                       ) -> cst.SimpleStatementLine | cst.BaseCompoundStatement:
    """``stmt`` with an empty line first, unless its leading lines start with one."""
    lines = stmt.leading_lines
    if lines and lines[0].comment is None:
        return stmt
    return stmt.with_changes(leading_lines=(cst.EmptyLine(), *lines))


def _with_visitor(module: cst.Module, needed: Sequence[tuple[str, str | None]]) -> cst.Module:
    """libcst's ``AddImportsVisitor`` for ``needed``, run on the module's head only (the preamble, the leading
    import block and the statement after it: all the visitor reads or changes)."""
    from libcst.codemod import CodemodContext
    from libcst.codemod.visitors import AddImportsVisitor

    context = CodemodContext()
    for mod, obj in needed:
        AddImportsVisitor.add_needed_import(context, mod, obj)
    body = list(module.body)
    cut = min(len(body), _leading_imports(body)[1] + 1)
    head = AddImportsVisitor(context).transform_module(module.with_changes(body=body[:cut]))
    return module.with_changes(body=[*head.body, *body[cut:]])
