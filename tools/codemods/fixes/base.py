"""The fix base class and what a fix returns.

A fix is one small libcst transformer: the policy names a site (a line, a span, an op) and the fix
edits the nodes there. It plans its edits in ``plan`` (with libcst metadata: positions from
``PositionProvider``, scopes, qualified names), records them with :meth:`Fix.edit`, and the edits
are applied bottom-up as the transformer leaves each node (an edit gets the node with its
children's edits applied, so edits compose). Text outside the edited nodes is kept byte for byte.
A fix never prints and never touches files: :func:`apply` returns a :class:`FixResult` (the new
text, the sites, warnings) or None when the fix found nothing to do.
"""

from __future__ import annotations

import ast
import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import libcst as cst
from libcst.metadata import CodeRange, MetadataWrapper, PositionProvider, QualifiedNameProvider, ScopeProvider
from libcst.metadata.scope_provider import BaseAssignment, ClassScope, ComprehensionScope, Scope

from tools.codemods.device import torch_alias
from tools.codemods.nodes import dotted

logger = logging.getLogger(__name__)

Transform = Callable[[Any], cst.CSTNode]


class Located(Protocol):
    """Where a ``ferry scan`` finding stands (``tools.scan.models.Finding``): 1-based lines and columns."""

    @property
    def line(self) -> int: ...
    @property
    def col(self) -> int: ...
    @property
    def end_line(self) -> int: ...
    @property
    def end_col(self) -> int: ...


@dataclass(frozen=True)
class Span:
    """A source range as libcst's ``PositionProvider`` gives it: 1-based lines, 0-based columns in
    characters, the end exclusive."""

    line: int
    column: int
    end_line: int
    end_column: int

    @classmethod
    def of(cls, rng: CodeRange) -> Span:
        return cls(rng.start.line, rng.start.column, rng.end.line, rng.end.column)

    @classmethod
    def of_finding(cls, finding: Located) -> Span:
        """The span of a ``ferry scan`` finding (its columns are 1-based)."""
        return cls(finding.line, finding.col - 1, finding.end_line, finding.end_col - 1)

    def overlaps(self, other: Span) -> bool:
        return (self.line, self.column) < (other.end_line, other.end_column) and \
            (other.line, other.column) < (self.end_line, self.end_column)

    def __str__(self) -> str:
        return f"{self.line}:{self.column + 1}"


@dataclass(frozen=True)
class FixResult:
    """What a fix did: ``source`` is the new text (the input itself when nothing could be changed,
    then ``warnings`` say why); ``sites`` are the edited nodes' spans in the ORIGINAL text."""

    fix_id: str
    source: str
    sites: tuple[Span, ...]
    warnings: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        return bool(self.sites)

    @property
    def line(self) -> int:
        """The first edited line (0 when nothing was edited)."""
        return min(s.line for s in self.sites) if self.sites else 0


class Fix(cst.CSTTransformer):
    """Base class: subclasses set ``ID``/``NAME``/``DESCRIPTION``, take their parameters in
    ``__init__`` and choose their edits in :meth:`plan`."""

    ID: ClassVar[str] = ""
    NAME: ClassVar[str] = ""
    DESCRIPTION: ClassVar[str] = ""
    #: dtypes the fix's edits change (original -> new): parity compares such tensors at the new
    #: dtype's tier (tools.parity CompareOptions.dtype_changes)
    DTYPE_CHANGES: ClassVar[tuple[tuple[str, str], ...]] = ()
    METADATA_DEPENDENCIES = (PositionProvider, ScopeProvider, QualifiedNameProvider)

    def __init__(self) -> None:
        super().__init__()
        self._edits: dict[int, tuple[cst.CSTNode, Transform]] = {}
        self.sites: list[Span] = []
        self.warnings: list[str] = []

    # -- what subclasses implement ----------------------------------------------------------
    def plan(self, module: cst.Module) -> None:
        raise NotImplementedError

    # -- recording --------------------------------------------------------------------------
    def edit(self, node: cst.CSTNode, transform: Transform, site: Span | None = None) -> None:
        """Rewrite ``node`` with ``transform(updated node)`` (a second edit of the node composes);
        ``site`` is where the edit shows (default: the node's span)."""
        previous = self._edits.get(id(node))
        if previous is not None:
            first = previous[1]
            self._edits[id(node)] = (node, lambda updated: transform(first(updated)))
        else:
            self._edits[id(node)] = (node, transform)
        self.sites.append(site if site is not None else self.span(node))

    def warn(self, message: str) -> None:
        self.warnings.append(f"{self.ID}: {message}")

    # -- metadata helpers -------------------------------------------------------------------
    def span(self, node: cst.CSTNode) -> Span:
        return Span.of(self.get_metadata(PositionProvider, node))

    def qnames(self, node: cst.CSTNode) -> set[str]:
        return {q.name for q in self.get_metadata(QualifiedNameProvider, node, set())}

    def qname_in(self, node: cst.CSTNode, names: Collection[str]) -> str | None:
        """The qualified name of ``node`` that is in ``names`` (``T.zeros`` after ``import torch as T``
        is ``torch.zeros``), or None."""
        return next((n for n in sorted(self.qnames(node)) if n in names), None)

    def function_scope(self, node: cst.CSTNode) -> Scope | None:
        """The scope of the function (or lambda, or the module) ``node`` is in: comprehensions and
        class bodies belong to the scope around them."""
        scope = self.get_metadata(ScopeProvider, node, None)
        while isinstance(scope, (ComprehensionScope, ClassScope)):
            scope = scope.parent
        return scope

    def calls_covering(self, module: cst.Module, line: int) -> list[cst.Call]:
        """Calls whose span covers ``line``, innermost first (fewest lines; on a tie the one starting
        further right; then outer before inner)."""
        found = [c for c in nodes_of(module, cst.Call) if self.span(c).line <= line <= self.span(c).end_line]
        return sorted(found, key=lambda c: (self.span(c).end_line - self.span(c).line, -self.span(c).column))

    # -- the traversal ----------------------------------------------------------------------
    def visit_Module(self, node: cst.Module) -> bool:
        self.plan(node)
        return bool(self._edits)

    def on_leave(self, original_node, updated_node):  # type: ignore[no-untyped-def]
        updated_node = super().on_leave(original_node, updated_node)
        entry = self._edits.get(id(original_node))
        if entry is not None and entry[0] is original_node:
            updated_node = entry[1](updated_node)
        return updated_node


def bound_values(scope: Scope | None) -> set[str]:
    """Names ``scope`` binds to values (parameters, assignments, loop targets...), not to imports,
    functions or classes."""
    if scope is None:
        return set()
    out: set[str] = set()
    for assignment in scope.assignments:
        if assignment.scope is scope and _binds_value(assignment):
            out.add(assignment.name)
    return out


def _binds_value(assignment: BaseAssignment) -> bool:
    node = getattr(assignment, "node", None)
    return node is not None and not isinstance(node, (cst.Import, cst.ImportFrom, cst.FunctionDef, cst.ClassDef))


class _Collect(cst.CSTVisitor):
    def __init__(self, kind: type | tuple[type, ...]) -> None:
        super().__init__()
        self.kind = kind
        self.found: list[Any] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        if isinstance(node, self.kind):
            self.found.append(node)
        return True


def nodes_of(root: cst.CSTNode, kind: type | tuple[type, ...]) -> list[Any]:
    """Every node of type ``kind`` under ``root`` (itself included), in source order."""
    collector = _Collect(kind)
    root.visit(collector)
    return collector.found


class _Names(cst.CSTVisitor):
    """Names read in an expression: not attribute names (``x.device``'s ``device``), keywords or
    parameters."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[cst.Name] = []

    def visit_Name(self, node: cst.Name) -> None:
        self.found.append(node)

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        node.value.visit(self)
        return False

    def visit_Arg(self, node: cst.Arg) -> bool:
        node.value.visit(self)
        return False

    def visit_Param(self, node: cst.Param) -> bool:
        return False


def names_in(root: cst.CSTNode) -> list[cst.Name]:
    names = _Names()
    root.visit(names)
    return names.found


def torch_name(module: cst.Module) -> str | None:
    """The name torch goes by in ``module``: its module-level ``import torch [as X]``, else ``torch``
    when some function imports it as such; None when the module does not import torch."""
    alias = torch_alias(module)
    if alias is not None:
        return alias
    for imp in nodes_of(module, cst.Import):
        if any(dotted(a.name) == "torch" and a.asname is None for a in imp.names):
            return "torch"
    return None


def syntax_error(source: str, filename: str = "<source>") -> str | None:
    """Why CPython would not parse ``source`` (``"invalid syntax at line 3"``), or None when it parses."""
    try:
        ast.parse(source, filename=filename)
    except SyntaxError as exc:
        return f"{exc.msg} at line {exc.lineno}"
    return None


def apply(fix: Fix, source: str, filename: str = "<source>") -> FixResult | None:
    """Run ``fix`` on ``source``. None when the source does not parse or the fix found nothing to do;
    a result whose ``changed`` is False (and whose warnings say why) when its edit would not parse."""
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError as exc:
        logger.info("%s: %s does not parse, not fixed: %s", fix.ID, filename, exc.message)
        return None
    new_module = MetadataWrapper(module, unsafe_skip_copy=True).visit(fix)
    if not fix.sites:
        return FixResult(fix.ID, source, (), tuple(fix.warnings)) if fix.warnings else None
    new = new_module.code
    if new == source:
        return None
    error = syntax_error(new, filename)
    if error is not None:  # never hand back code that does not parse
        logger.warning("%s: the edit of %s would not parse (%s); left unchanged", fix.ID, filename, error)
        return FixResult(fix.ID, source, (), (*fix.warnings, f"{fix.ID}: the edit would not parse ({error}); "
                                              "left unchanged"))
    return FixResult(fix.ID, new, tuple(sorted(set(fix.sites), key=lambda s: (s.line, s.column))),
                     tuple(fix.warnings))


def source_lines(source: str) -> list[str]:
    r"""The lines of ``source`` as Python numbers them (tracebacks, ``ast``, libcst), ends kept: only
    ``\n`` ends a line (``str.splitlines`` also splits at form feeds and other separators)."""
    lines = source.split("\n")
    out = [line + "\n" for line in lines[:-1]]
    return [*out, lines[-1]] if lines[-1] else out


def span_text(source: str, span: Span) -> str:
    """The text ``span`` covers in ``source`` (columns in characters, as libcst counts them)."""
    lines = source_lines(source)
    if not (0 < span.line <= span.end_line <= len(lines)):
        return ""
    if span.line == span.end_line:
        return lines[span.line - 1][span.column:span.end_column]
    parts = [lines[span.line - 1][span.column:], *lines[span.line:span.end_line - 1],
             lines[span.end_line - 1][:span.end_column]]
    return "".join(parts)
