"""A read-only traversal of libcst trees that does not rebuild them.

libcst's ``CSTNode.visit`` always goes through ``_visit_and_replace_children``, which builds (and
validates) a new copy of every node it passes, even for a read-only ``CSTVisitor``, whose result
it then throws away (``visit`` returns the original node for those). Every traversal Ferry makes
is such a visitor: libcst's scope and expression-context analyses, the parent map, the rules'
batched pass and the rules' own sub-walks. Copying the tree was most of the scan's time.

:func:`install` replaces ``CSTNode.visit`` with a version that, for ``CSTVisitor`` instances only,
walks the original children in the same order and makes the same callbacks (``on_visit``,
``on_visit_attribute``, ``on_leave_attribute``, ``on_leave``) without building anything; a
transformer still takes libcst's own path. The order comes from each node class's own
``_visit_and_replace_children`` (read once from its source): the fields it visits, in the order
it visits them. A class whose method does something this reading does not recognise keeps
libcst's path (``tests/codemods/test_fastvisit.py`` checks the callbacks match libcst's on every
node of the golden fixtures).
"""

from __future__ import annotations

import ast
import inspect
import logging
import re
import textwrap
from collections.abc import Callable, Mapping
from typing import Any

import libcst as cst
from libcst import BatchableCSTVisitor, CSTNode, CSTVisitor, MaybeSentinel
from libcst._batched_visitor import _BatchedCSTVisitor

logger = logging.getLogger(__name__)

#: per field: (name, visited only when not None). libcst makes the attribute callbacks for a None
#: optional field or a MaybeSentinel too; a field visited under ``... if x is not None else None``
#: gets no callback at all when it is None.
_Plan = tuple[tuple[str, bool], ...]
_VISIT_HELPERS = frozenset({"visit_required", "visit_optional", "visit_sentinel", "visit_sequence",
                            "visit_iterable", "visit_body_sequence", "visit_body_iterable"})
_plans: dict[type, _Plan | None] = {}
_original_visit: Callable[..., Any] | None = None


def _plan_of_method(method: Callable[..., Any]) -> _Plan | None:
    """The fields ``method`` (a ``_visit_and_replace_children``) visits, in order; None when it is
    not of the plain shape ``return Node(field=visit_x(self, "field", ...), ...)``."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(method)))
    except (OSError, TypeError, SyntaxError):
        return None
    fn = tree.body[0]
    if not isinstance(fn, ast.FunctionDef):
        return None
    body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if len(body) == 1 and isinstance(body[0], ast.Return) and isinstance(body[0].value, ast.Name) \
            and body[0].value.id == "self":
        return ()  # a leaf
    # allowed: local aliases of fields (``names = self.names``), then one construction returned
    # directly or through one local (``ret = Node(...); return ret``)
    call: ast.expr | None = None
    for stmt in body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            value = stmt.value
            if isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name) and value.value.id == "self":
                continue
            if isinstance(value, ast.Call) and call is None:
                call = value
                continue
            return None
        if isinstance(stmt, ast.Return) and stmt.value is not None:
            if isinstance(stmt.value, ast.Call):
                if call is not None:
                    return None
                call = stmt.value
            elif not isinstance(stmt.value, ast.Name):
                return None
            continue
        return None
    if not isinstance(call, ast.Call) or call.args:
        return None
    fields: list[tuple[str, bool]] = []
    for kw in call.keywords:
        value = kw.value
        if isinstance(value, ast.Call):
            field = _helper_field(value)
            if field is None:
                return None
            fields.append((field, False))
        elif isinstance(value, ast.IfExp):
            test = value.test
            body_field = _helper_field(value.body) if isinstance(value.body, ast.Call) else None
            if body_field is None:
                return None
            if isinstance(value.orelse, ast.Constant) and value.orelse.value is None \
                    and isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.IsNot) \
                    and isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value is None:
                fields.append((body_field, True))  # visited only when not None
            elif isinstance(value.orelse, ast.Call) and _helper_field(value.orelse) == body_field:
                fields.append((body_field, False))  # one helper or another, same callbacks
            else:
                return None
        elif isinstance(value, (ast.Attribute, ast.Constant)):
            continue  # a plain value copied over (``encoding=self.encoding``)
        else:
            return None
    return tuple(fields)


def _helper_field(call: ast.Call) -> str | None:
    if not (isinstance(call.func, ast.Name) and call.func.id in _VISIT_HELPERS and len(call.args) == 4):
        return None
    parent, name = call.args[0], call.args[1]
    if not (isinstance(parent, ast.Name) and parent.id == "self"
            and isinstance(name, ast.Constant) and isinstance(name.value, str)):
        return None
    return name.value


def plan_for(cls: type) -> _Plan | None:
    """The traversal plan of a node class (cached); None means libcst's own path."""
    try:
        return _plans[cls]
    except KeyError:
        pass
    plan: _Plan | None = None
    for klass in cls.__mro__:
        method = klass.__dict__.get("_visit_and_replace_children")
        if method is not None:
            plan = _plan_of_method(method)
            break
    if plan is None:
        logger.debug("libcst node %s keeps libcst's own traversal", cls.__name__)
    _plans[cls] = plan
    return plan


_ATTRIBUTE_HOOK = re.compile(r"^(?:visit|leave)_([A-Z][A-Za-z0-9]*)_[a-z]")


def _trivia() -> frozenset[type]:
    """Whitespace, comments, operators and brackets: node classes whose subtrees hold nothing else
    (libcst's ``whitespace`` and ``op`` modules and the bracket tokens). Most nodes of a module are these."""
    from libcst._nodes import op, whitespace

    found: set[type] = {cst.LeftParen, cst.RightParen, cst.LeftSquareBracket, cst.RightSquareBracket,
                        cst.LeftCurlyBrace, cst.RightCurlyBrace}
    for module in (op, whitespace):
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, CSTNode) and value.__module__ == module.__name__ \
                    and not inspect.isabstract(value):
                found.add(value)
    return frozenset(found)


TRIVIA = _trivia()
_TRIVIA_NAMES = frozenset(t.__name__ for t in TRIVIA)
_NO_SKIP: frozenset[type] = frozenset()
_by_class: dict[type, tuple[frozenset[str], bool]] = {}


def _class_hooks(cls: type) -> tuple[frozenset[str], bool]:
    """(node classes ``cls`` has attribute hooks for, whether any hook names a trivia class)."""
    entry = _by_class.get(cls)
    if entry is None:
        # libcst's CSTVisitor declares a no-op method for every hook; only real ones count
        entry = _hooks_of([n for n in dir(cls) if n.startswith(("visit_", "leave_"))
                           and not getattr(getattr(cls, n), "_is_no_op", False)])
        _by_class[cls] = entry
    return entry


def _hooks_of(names: list[str]) -> tuple[frozenset[str], bool]:
    attribute = frozenset(m.group(1) for n in names if (m := _ATTRIBUTE_HOOK.match(n)))
    trivia = any(n.split("_", 2)[1] in _TRIVIA_NAMES for n in names if n.count("_") >= 1)
    return attribute, trivia


def _profile(visitor: CSTVisitor) -> tuple[frozenset[str] | None, frozenset[type]]:
    """How to walk for ``visitor``: the node classes whose attribute callbacks can do something (None:
    all, the visitor overrides the callbacks), and the child classes whose subtrees can be left out
    because every callback there would only look up a hook that does not exist."""
    cls = type(visitor)
    if cls is _BatchedCSTVisitor:
        attribute, trivia = _hooks_of(list(visitor.visitor_methods))  # type: ignore[attr-defined]
        plain = visitor.before_visit is None and visitor.after_leave is None  # type: ignore[attr-defined]
        return attribute, (TRIVIA if plain and not trivia else _NO_SKIP)
    default_attributes = (cls.on_visit_attribute is CSTVisitor.on_visit_attribute
                          and cls.on_leave_attribute is CSTVisitor.on_leave_attribute)
    if not default_attributes:
        return None, _NO_SKIP
    attribute, trivia = _class_hooks(cls)
    extra = getattr(visitor, "__dict__", None)
    if extra and any(k.startswith(("visit_", "leave_")) for k in extra):  # hooks set on the instance
        more, more_trivia = _hooks_of([k for k in extra if k.startswith(("visit_", "leave_"))])
        attribute, trivia = attribute | more, trivia or more_trivia
    plain = cls.on_visit is CSTVisitor.on_visit and cls.on_leave is CSTVisitor.on_leave
    return attribute, (TRIVIA if plain and not trivia else _NO_SKIP)


def _walk(node: CSTNode, visitor: CSTVisitor, hooked: frozenset[str] | None, skip: frozenset[type]) -> None:
    cls = type(node)
    plan: _Plan | None = _plans[cls] if cls in _plans else plan_for(cls)
    if plan is None:
        assert _original_visit is not None
        _original_visit(node, visitor)
        return
    if visitor.on_visit(node):
        callbacks = hooked is None or cls.__name__ in hooked
        for field, skip_none in plan:
            value = getattr(node, field)
            if value is None and skip_none:
                continue
            if callbacks:
                visitor.on_visit_attribute(node, field)
            if value is None or value is MaybeSentinel.DEFAULT:
                pass
            elif type(value) is tuple or type(value) is list:
                for child in value:
                    if type(child) not in skip:
                        _walk(child, visitor, hooked, skip)
            elif type(value) not in skip:
                _walk(value, visitor, hooked, skip)
            if callbacks:
                visitor.on_leave_attribute(node, field)
    visitor.on_leave(node)


_Table = dict[type, tuple[Callable[[CSTNode], None], ...]]


def _walk_batched(node: CSTNode, visitor: CSTVisitor, methods: Mapping[str, list[Callable[[CSTNode], None]]],
                  visits: _Table, leaves: _Table, hooked: frozenset[str], skip: frozenset[type]) -> None:
    """:func:`_walk` for libcst's batched visitor (all rules in one pass) with no before/after hooks: its
    ``on_visit``/``on_leave`` only call the rules' methods for the node's class, looked up here once per
    class instead of by name at every node (it always visits the children)."""
    cls = type(node)
    plan: _Plan | None = _plans[cls] if cls in _plans else plan_for(cls)
    if plan is None:
        assert _original_visit is not None
        _original_visit(node, visitor)
        return
    fns = visits.get(cls)
    if fns is None:
        fns = visits[cls] = tuple(methods.get(f"visit_{cls.__name__}", ()))
    for fn in fns:
        fn(node)
    callbacks = cls.__name__ in hooked
    for field, skip_none in plan:
        value = getattr(node, field)
        if value is None and skip_none:
            continue
        if callbacks:
            visitor.on_visit_attribute(node, field)
        if value is None or value is MaybeSentinel.DEFAULT:
            pass
        elif type(value) is tuple or type(value) is list:
            for child in value:
                if type(child) not in skip:
                    _walk_batched(child, visitor, methods, visits, leaves, hooked, skip)
        elif type(value) not in skip:
            _walk_batched(value, visitor, methods, visits, leaves, hooked, skip)
        if callbacks:
            visitor.on_leave_attribute(node, field)
    fns = leaves.get(cls)
    if fns is None:
        fns = leaves[cls] = tuple(methods.get(f"leave_{cls.__name__}", ()))
    for fn in fns:
        fn(node)


def _visit(self: CSTNode, visitor: Any) -> Any:
    if isinstance(visitor, CSTVisitor):
        hooked, skip = _profile(visitor)
        if type(visitor) is _BatchedCSTVisitor and visitor.before_visit is None \
                and visitor.after_leave is None and hooked is not None:
            _walk_batched(self, visitor, visitor.visitor_methods, {}, {}, hooked, skip)
        else:
            _walk(self, visitor, hooked, skip)
        return self
    assert _original_visit is not None
    return _original_visit(self, visitor)


_original_get_visitors: Callable[..., Any] | None = None
_visitor_names: dict[type, tuple[str, ...]] = {}


def _get_visitors(self: BatchableCSTVisitor) -> Mapping[str, Callable[[CSTNode], None]]:
    """libcst's ``BatchableCSTVisitor.get_visitors`` (its hook methods, by name), with the names found
    once per class: libcst lists every member of the instance (``inspect.getmembers``, about a thousand
    no-op hooks) each time, once per file for each metadata provider."""
    assert _original_get_visitors is not None
    if any(k.startswith(("visit_", "leave_")) for k in getattr(self, "__dict__", ())):
        return _original_get_visitors(self)  # type: ignore[no-any-return]  # hooks set on the instance
    cls = type(self)
    names = _visitor_names.get(cls)
    if names is None:
        names = _visitor_names[cls] = tuple(_original_get_visitors(self))
    return {n: getattr(self, n) for n in names}


def install() -> None:
    """Route read-only visits through :func:`_walk` (idempotent)."""
    global _original_visit, _original_get_visitors
    if _original_visit is None:
        _original_visit = CSTNode.visit
        CSTNode.visit = _visit  # type: ignore[method-assign]
    if _original_get_visitors is None:
        _original_get_visitors = BatchableCSTVisitor.get_visitors
        BatchableCSTVisitor.get_visitors = _get_visitors  # type: ignore[method-assign]


def uninstall() -> None:
    global _original_visit, _original_get_visitors
    if _original_visit is not None:
        CSTNode.visit = _original_visit  # type: ignore[method-assign]
        _original_visit = None
    if _original_get_visitors is not None:
        BatchableCSTVisitor.get_visitors = _original_get_visitors  # type: ignore[method-assign]
        _original_get_visitors = None
