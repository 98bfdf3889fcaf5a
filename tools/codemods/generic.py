"""Table-driven rule bases: call renames and name/import reports.

A concrete rule module subclasses one of these and points it at its table in ``tables.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import libcst as cst

from tools.codemods.base import LOOSE_PARENTS, Category, CodemodRule, Transform
from tools.codemods.nodes import code, expr
from tools.codemods.tables import CallMapping, Report


def _in_import(node: cst.CSTNode, rule: CodemodRule) -> bool:
    parent = rule.parent(node)
    while isinstance(parent, (cst.Attribute, cst.Name)):
        parent = rule.parent(parent)
    return isinstance(parent, (cst.ImportAlias, cst.ImportFrom, cst.Import))


def _accelerator_branch(test: cst.BaseExpression) -> str | None:
    """Which branch of an ``if`` testing ``test`` runs only on an accelerator ("body" or "orelse"), if one does."""
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):  # both hold in the body
        return "body" if "body" in (_accelerator_branch(test.left), _accelerator_branch(test.right)) else None
    negated = isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not)
    inner = test.expression if isinstance(test, cst.UnaryOperation) and negated else test
    if isinstance(inner, cst.Call) and "is_available" in code(inner.func):
        return "orelse" if negated else "body"
    if (not negated and isinstance(test, cst.Comparison) and len(test.comparisons) == 1
            and code(test.left).endswith(".type")):
        op, right = test.comparisons[0].operator, test.comparisons[0].comparator
        if isinstance(right, cst.SimpleString) and right.evaluated_value == "cuda":
            return "body" if isinstance(op, cst.Equal) else "orelse" if isinstance(op, cst.NotEqual) else None
    return None


class CallMapRule(CodemodRule):
    """Rewrites calls ``torch.cuda.X(args)`` to the mapped call, keeping the argument text."""

    CATEGORY: ClassVar[Category] = "auto"
    CALLS: ClassVar[Mapping[str, CallMapping]] = {}

    def visit_Call(self, node: cst.Call) -> None:
        name = self.qname_in(node.func, self.CALLS)
        if name is None:
            return
        mapping = self.CALLS[name]
        rejected = [a.keyword.value for a in node.args
                    if a.keyword is not None and a.keyword.value in mapping.reject_kwargs]
        if rejected or (mapping.no_positional and any(a.keyword is None for a in node.args)):
            why = (f"argument(s) {', '.join(rejected)} have no equivalent in {mapping.target}" if rejected
                   else "positional arguments cannot be kept when the device is added by keyword")
            self.hit(node, f"{name}(): {why}", category="review", suggestion=self._render(node, mapping))
            return
        if mapping.review:
            self.hit(node, mapping.review, category="review", suggestion=self._render(node, mapping))
            return
        target, prefix = self._resolve(node, mapping)

        def rewrite(updated: cst.CSTNode) -> cst.CSTNode:
            return self._rewrite(updated, target, prefix, mapping.drop_args)

        transform: Transform = rewrite
        if mapping.absent is not None and not self.availability_guarded(node):
            transform = self._without_accelerator(node, transform, mapping.absent)
        self.hit(node, f"{name}() is CUDA-only", category="auto", suggestion=code(transform(node)),
                 transform=transform, needs_device=mapping.needs_device, add_imports=(("torch", None),))

    def _without_accelerator(self, node: cst.Call, rewrite: Transform, absent: str) -> Transform:
        """``rewrite`` answering ``absent`` where no accelerator is (what the CUDA call answers without a GPU)."""
        available = self.torch_text("torch.accelerator.is_available()")
        # a conditional expression reads as one operand only in parentheses (``x / (a if b else 0)``)
        wrap = not isinstance(self.parent(node), LOOSE_PARENTS) and not node.lpar

        def transform(updated: cst.CSTNode) -> cst.CSTNode:
            assert isinstance(updated, cst.Call)
            call = code(rewrite(updated.with_changes(lpar=[], rpar=[])))
            guarded = f"{call} if {available} else {absent}"
            new = expr(guarded)
            if wrap:
                return new.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
            return new.with_changes(lpar=updated.lpar, rpar=updated.rpar)

        return transform

    def availability_guarded(self, node: cst.CSTNode) -> bool:
        """Whether ``node`` runs only where an accelerator is: in the branch of an ``if`` (or of a conditional
        expression) that an availability test (``is_available()``) or a device-type test (``device.type ==
        "cuda"``) selects."""
        child, parent = node, self.parent(node)
        while parent is not None and not isinstance(parent, (cst.FunctionDef, cst.ClassDef, cst.Module)):
            if isinstance(parent, (cst.If, cst.IfExp)):
                branch = _accelerator_branch(parent.test)
                if branch is not None and child is getattr(parent, branch):
                    return True
            child, parent = parent, self.parent(parent)
        return False

    def _resolve(self, node: cst.Call, mapping: CallMapping) -> tuple[str, list[str]]:
        """Everything that needs metadata is resolved here, at visit time."""
        target = self.torch_text(mapping.target.format(device=self.device_ref(node)))
        prefix = [self.torch_text(p.format(device=self.device_ref(node), device_type=self.device_type(node)))
                  for p in mapping.prefix]
        return target, prefix

    def _render(self, node: cst.Call, mapping: CallMapping) -> str:
        target, prefix = self._resolve(node, mapping)
        return code(self._rewrite(node, target, prefix, mapping.drop_args))

    @staticmethod
    def _rewrite(updated: cst.CSTNode, target: str, prefix: list[str], drop_args: bool) -> cst.CSTNode:
        assert isinstance(updated, cst.Call)
        args = "" if drop_args else "".join(code(a) for a in updated.args)
        parts = ", ".join(prefix)
        if parts and args:
            parts += ", "
        new = expr(f"{target}({parts}{args})")
        assert isinstance(new, cst.Call)
        return new.with_changes(lpar=updated.lpar, rpar=updated.rpar)


class NameReportRule(CodemodRule):
    """Reports uses of the qualified names in ``NAMES`` and imports of modules in ``MODULES``."""

    CATEGORY: ClassVar[Category] = "review"
    NAMES: ClassVar[Mapping[str, Report]] = {}
    MODULES: ClassVar[Mapping[str, Report]] = {}

    def _report(self, node: cst.CSTNode, rep: Report) -> None:
        self.hit(node, rep.message, category=rep.category or self.CATEGORY, suggestion=rep.suggestion)

    def _check(self, node: cst.CSTNode) -> None:
        if not self.NAMES:
            return
        name = self.qname_in(node, self.NAMES)
        if name is not None and self.is_outermost_attribute(node) and not _in_import(node, self):
            parent = self.parent(node)
            target = parent if isinstance(parent, cst.Call) and parent.func is node else node
            self._report(target, self.NAMES[name])

    def visit_Name(self, node: cst.Name) -> None:
        self._check(node)

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self._check(node)

    def _module_match(self, dotted_name: str) -> Report | None:
        for mod, rep in self.MODULES.items():
            if dotted_name == mod or dotted_name.startswith(mod + "."):
                return rep
        return None

    def visit_Import(self, node: cst.Import) -> None:
        if not self.MODULES:
            return
        for alias in node.names:
            rep = self._module_match(code(alias.name))
            if rep is not None:
                self._report(node, rep)
                return

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        if not self.MODULES or node.module is None or node.relative:
            return
        base = code(node.module)
        rep = self._module_match(base)
        if rep is None and not isinstance(node.names, cst.ImportStar):
            for alias in node.names:
                rep = self._module_match(f"{base}.{code(alias.name)}")
                if rep is not None:
                    break
        if rep is not None:
            self._report(node, rep)
