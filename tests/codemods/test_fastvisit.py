"""The read-only traversal (tools.codemods.fastvisit) makes exactly libcst's callbacks and builds no node:
checked on every golden fixture."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, ScopeProvider

from tools.codemods import fastvisit

FIXTURES = Path(__file__).parent / "fixtures"
SOURCES = sorted(p for p in FIXTURES.rglob("*.py"))


def _modules() -> Iterator[tuple[Path, cst.Module]]:
    for path in SOURCES:
        yield path, cst.parse_module(path.read_text(encoding="utf-8"))


@pytest.fixture
def libcst_visit() -> Iterator[None]:
    """libcst's own traversal for the duration of a block (the engine installs the fast one)."""
    fastvisit.uninstall()
    try:
        yield
    finally:
        fastvisit.install()


class _EveryCallback(cst.CSTVisitor):
    """Overrides the callbacks themselves: sees every node and every attribute."""

    def __init__(self) -> None:
        super().__init__()
        self.log: list[tuple[str, int, str]] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        self.log.append(("visit", id(node), type(node).__name__))
        return not isinstance(node, cst.Lambda)  # one subtree left out, as a visitor may

    def on_leave(self, original_node: cst.CSTNode) -> None:
        self.log.append(("leave", id(original_node), ""))

    def on_visit_attribute(self, node: cst.CSTNode, attribute: str) -> None:
        self.log.append(("attr", id(node), attribute))

    def on_leave_attribute(self, original_node: cst.CSTNode, attribute: str) -> None:
        self.log.append(("attr-end", id(original_node), attribute))


class _Hooks(cst.CSTVisitor):
    """Ordinary hooks, as the rules write them (whitespace subtrees can then be left out)."""

    def __init__(self) -> None:
        super().__init__()
        self.log: list[tuple[str, int]] = []

    def visit_Name(self, node: cst.Name) -> None:
        self.log.append(("name", id(node)))

    def visit_Call(self, node: cst.Call) -> None:
        self.log.append(("call", id(node)))

    def leave_Attribute(self, original_node: cst.Attribute) -> None:
        self.log.append(("attribute", id(original_node)))

    def visit_ClassDef_bases(self, node: cst.ClassDef) -> None:
        self.log.append(("bases", id(node)))

    def visit_Arg(self, node: cst.Arg) -> bool:
        self.log.append(("arg", id(node)))
        return node.keyword is None


class _WhitespaceHook(_Hooks):
    def visit_Comment(self, node: cst.Comment) -> None:
        self.log.append(("comment", id(node)))


class _Batchable(cst.BatchableCSTVisitor):
    def __init__(self, log: list[tuple[str, int]], tag: str) -> None:
        super().__init__()
        self.log, self.tag = log, tag

    def visit_Name(self, node: cst.Name) -> None:
        self.log.append((self.tag + "name", id(node)))

    def leave_Call(self, original_node: cst.Call) -> None:
        self.log.append((self.tag + "call", id(original_node)))

    def visit_Call_args(self, node: cst.Call) -> None:
        self.log.append((self.tag + "args", id(node)))


def _logs(visitor_type: type[cst.CSTVisitor], module: cst.Module) -> list[object]:
    visitor = visitor_type()
    assert module.visit(visitor) is module
    return list(visitor.log)  # type: ignore[attr-defined]


@pytest.mark.parametrize("visitor_type", [_EveryCallback, _Hooks, _WhitespaceHook])
def test_callbacks_match_libcst(visitor_type: type[cst.CSTVisitor], libcst_visit: None) -> None:
    modules = list(_modules())
    expected = [_logs(visitor_type, module) for _, module in modules]
    fastvisit.install()
    try:
        for (path, module), want in zip(modules, expected, strict=True):
            assert _logs(visitor_type, module) == want, path
    finally:
        fastvisit.uninstall()


def test_batched_callbacks_match_libcst(libcst_visit: None) -> None:
    def run(module: cst.Module) -> list[tuple[str, int]]:
        log: list[tuple[str, int]] = []
        cst.visit_batched(module, [_Batchable(log, "a:"), _Batchable(log, "b:")])
        return log

    modules = list(_modules())
    expected = [run(module) for _, module in modules]
    fastvisit.install()
    try:
        for (path, module), want in zip(modules, expected, strict=True):
            assert run(module) == want, path
    finally:
        fastvisit.uninstall()


def test_scope_analysis_unchanged(libcst_visit: None) -> None:
    """libcst's scope analysis (manual sub-visits, attribute hooks) gives the same scopes and accesses."""

    def summary(module: cst.Module) -> list[object]:
        scopes = MetadataWrapper(module, unsafe_skip_copy=True).resolve(ScopeProvider)
        index: dict[int, int] = {}  # scope objects are new on each run: number them by first appearance

        def number(scope: object) -> int:
            return index.setdefault(id(scope), len(index))

        out: list[object] = []
        for node, scope in scopes.items():
            if scope is None:
                continue
            out.append((id(node), type(scope).__name__, number(scope), number(scope.parent),
                        sorted((a.name, id(a.node)) for a in scope.assignments),
                        sorted(id(a.node) for a in scope.accesses)))
        return out

    modules = [m for _, m in _modules()][:80]
    expected = [summary(m) for m in modules]
    fastvisit.install()
    try:
        assert [summary(m) for m in modules] == expected
    finally:
        fastvisit.uninstall()


def test_read_only_visit_builds_no_node(monkeypatch: pytest.MonkeyPatch) -> None:
    """libcst rebuilds (and validates) every node it walks, even for a read-only visitor; the fast walk
    builds none."""
    fastvisit.install()
    module = cst.parse_module("import torch\nx = torch.ones(3).cuda()  # c\n\n\ndef f(a, b=1):\n    return a + b\n")
    built: list[str] = []
    original = cst.CSTNode.__post_init__

    def counting(self: cst.CSTNode) -> None:
        built.append(type(self).__name__)
        original(self)

    monkeypatch.setattr(cst.CSTNode, "__post_init__", counting)
    visitor = _Hooks()
    assert module.visit(visitor) is module
    assert visitor.log  # it did walk
    assert built == []


def test_get_visitors_cached_matches_libcst() -> None:
    fastvisit.uninstall()
    try:
        want = _Batchable([], "x").get_visitors()
    finally:
        fastvisit.install()
    got = _Batchable([], "y").get_visitors()
    assert sorted(got) == sorted(want) == ["leave_Call", "visit_Call_args", "visit_Name"]
    assert all(getattr(fn, "__self__", None) is not None for fn in got.values())


def test_every_class_has_a_plan() -> None:
    """Every concrete libcst node class is walked without rebuilding (none falls back to libcst's path)."""

    def subclasses(cls: type) -> Iterator[type]:
        for sub in cls.__subclasses__():
            yield sub
            yield from subclasses(sub)

    missing = sorted(c.__name__ for c in set(subclasses(cst.CSTNode))
                     if c.__module__.startswith("libcst.") and "_visit_and_replace_children" in vars(c)
                     and fastvisit.plan_for(c) is None)
    assert missing == []


def test_trivia_subtrees_hold_only_trivia() -> None:
    """Whitespace/operator/bracket nodes, the subtrees a hook-only visitor leaves out, never hold code."""

    class _Check(cst.CSTVisitor):
        def __init__(self) -> None:
            super().__init__()
            self.depth = 0
            self.bad: list[str] = []

        def on_visit(self, node: cst.CSTNode) -> bool:
            if self.depth and type(node) not in fastvisit.TRIVIA:
                self.bad.append(type(node).__name__)
            if type(node) in fastvisit.TRIVIA:
                self.depth += 1
            return True

        def on_leave(self, original_node: cst.CSTNode) -> None:
            if type(original_node) in fastvisit.TRIVIA:
                self.depth -= 1

    for path, module in _modules():
        check = _Check()
        module.visit(check)
        assert check.bad == [], path
