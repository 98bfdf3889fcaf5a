"""Quotes inside rewritten f-strings that Python 3.11 can read.

A rule that puts a new expression inside an f-string's braces writes its string literals with
double quotes; inside ``f"..."`` that only parses from Python 3.12 on. The engine calls
:func:`requote` when a rewrite does not parse: every string literal in an f-string's replacement
fields that uses the f-string's own (single-character) quote takes the other one, where its text
holds neither that other quote nor a backslash. Triple-quoted f-strings are left as they are.
"""

from __future__ import annotations

import libcst as cst

_OTHER = {'"': "'", "'": '"'}


def _quote_of(prefix_and_quote: str) -> str | None:
    """The single quote character ending an f-string's ``start`` (``f"``, ``rf'``...); None when triple."""
    if prefix_and_quote.endswith(('"""', "'''")):
        return None
    return prefix_and_quote[-1]


def _requoted(node: cst.SimpleString, taken: str) -> cst.SimpleString:
    value = node.value
    prefix = value[: len(value) - len(value.lstrip("rRbBuU"))]
    body = value[len(prefix):]
    if body.startswith(('"""', "'''")) or not body.startswith(taken):
        return node
    inner = body[1:-1]
    other = _OTHER[taken]
    if other in inner or "\\" in inner:
        return node
    return node.with_changes(value=f"{prefix}{other}{inner}{other}")


class _InFields(cst.CSTTransformer):
    """Requotes the string literals of one f-string's replacement fields (not of nested f-strings:
    the outer transformer visits those with their own quote)."""

    def __init__(self, taken: str) -> None:
        super().__init__()
        self.taken = taken

    def visit_FormattedString(self, node: cst.FormattedString) -> bool:
        return False

    def leave_SimpleString(self, original_node: cst.SimpleString,
                           updated_node: cst.SimpleString) -> cst.SimpleString:
        return _requoted(updated_node, self.taken)


class _Requote(cst.CSTTransformer):
    def leave_FormattedString(self, original_node: cst.FormattedString,
                              updated_node: cst.FormattedString) -> cst.FormattedString:
        taken = _quote_of(updated_node.start)
        if taken is None:
            return updated_node
        fields = _InFields(taken)
        parts = [cst.ensure_type(part.visit(fields), cst.FormattedStringExpression)
                 if isinstance(part, cst.FormattedStringExpression) else part for part in updated_node.parts]
        return updated_node.with_changes(parts=parts)


def requote(module: cst.Module) -> cst.Module:
    """``module`` with the string literals in its f-strings' fields quoted apart from the f-string."""
    return module.visit(_Requote())
