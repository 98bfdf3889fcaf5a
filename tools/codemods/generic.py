"""Table-driven rule bases: call renames and name/import reports.

A concrete rule module subclasses one of these and points it at its table in ``tables.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import libcst as cst

from tools.codemods.base import Category, Rule
from tools.codemods.nodes import code, expr
from tools.codemods.tables import CallMapping, Report


def _in_import(node: cst.CSTNode, rule: Rule) -> bool:
    parent = rule.parent(node)
    while isinstance(parent, (cst.Attribute, cst.Name)):
        parent = rule.parent(parent)
    return isinstance(parent, (cst.ImportAlias, cst.ImportFrom, cst.Import))


class CallMapRule(Rule):
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
        suggestion = self._rewrite(node, target, prefix, mapping.drop_args)
        self.hit(node, f"{name}() is CUDA-only", category="auto", suggestion=code(suggestion),
                 transform=lambda updated: self._rewrite(updated, target, prefix, mapping.drop_args),
                 needs_device=mapping.needs_device, add_imports=(("torch", None),))

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


class NameReportRule(Rule):
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
