"""FIX006 (review.replace-spans): replace the expressions at given spans (the scanner's positions of
review findings) by the rewrites proposed for them."""

from __future__ import annotations

import functools
from collections.abc import Sequence

import libcst as cst

from tools.codemods.fixes.base import Fix, FixResult, Span, apply, nodes_of


def _replacement(new: cst.CSTNode, updated: cst.CSTNode) -> cst.CSTNode:
    """The edit of a replaced span: the new expression, whatever the node became meanwhile."""
    return new


class ReplaceSpans(Fix):
    ID = "FIX006"
    NAME = "review.replace-spans"
    DESCRIPTION = ("The expression whose span is exactly a given one (a `ferry scan` finding's position) -> the given "
                   "replacement expression (the finding's proposed rewrite). A replacement that is not an "
                   "expression, a span that is no expression's, or one overlapping a span that starts later (of two "
                   "starting together: that is longer) is left as it is, with a warning.")

    def __init__(self, replacements: Sequence[tuple[Span, str]]) -> None:
        super().__init__()
        self.replacements = list(replacements)

    def plan(self, module: cst.Module) -> None:
        by_span: dict[Span, cst.BaseExpression] = {}
        for node in nodes_of(module, cst.BaseExpression):  # outermost first: the first of a span wins
            by_span.setdefault(self.span(node), node)
        taken: list[Span] = []
        for span, text in sorted(self.replacements, key=lambda r: (r[0].line, r[0].column, r[0].end_line,
                                                                   r[0].end_column), reverse=True):
            if any(span.overlaps(t) for t in taken):
                self.warn(f"{span}: overlaps a replacement already made; left as it is")
                continue
            node = by_span.get(span)
            if node is None:
                self.warn(f"{span}: no expression has exactly this span; left as it is")
                continue
            try:
                new = cst.parse_expression(text)
            except cst.ParserSyntaxError:
                self.warn(f"{span}: the replacement {text[:60]!r} is not an expression; left as it is")
                continue
            # the replaced node's own parentheses stay
            new = new.with_changes(lpar=node.lpar, rpar=node.rpar) if not new.lpar else new
            self.edit(node, functools.partial(_replacement, new))
            taken.append(span)


def replace_spans(source: str, replacements: Sequence[tuple[Span, str]], *,
                  filename: str = "<source>") -> FixResult | None:
    """Each ``(span, expression text)`` replaced; ``sites`` of the result are the spans replaced."""
    return apply(ReplaceSpans(replacements), source, filename)


FIX = ReplaceSpans
