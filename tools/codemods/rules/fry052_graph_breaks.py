"""FRY052 (perf.graph-break): data-dependent Python control flow inside torch.compile'd functions -> reported."""

from __future__ import annotations

import libcst as cst

from tools.codemods.base import CodemodRule, RuleContext
from tools.codemods.tables import SYNC_METHODS, TORCH_COMPILE


class _Scan(cst.CSTVisitor):
    def __init__(self) -> None:
        super().__init__()
        self.found = False

    def visit_Call(self, node: cst.Call) -> None:
        if isinstance(node.func, cst.Attribute) and node.func.attr.value in SYNC_METHODS | {"any", "all"}:
            self.found = True


class GraphBreaks(CodemodRule):
    ID = "FRY052"
    NAME = "perf.graph-break"
    DESCRIPTION = ("`if`/`while` on tensor values (.item(), .any(), .all(), .tolist()) inside a @torch.compile "
                   "function: a graph break (and recompiles when shapes change). Reported only.")
    CATEGORY = "review"
    ENTRIES = (52,)
    CONTEXTUAL = True

    def __init__(self, ctx: RuleContext) -> None:
        super().__init__(ctx)
        self._compiled_depth = 0

    def _is_compiled(self, node: cst.FunctionDef) -> bool:
        for deco in node.decorators:
            target = deco.decorator.func if isinstance(deco.decorator, cst.Call) else deco.decorator
            if self.qname_in(target, TORCH_COMPILE):
                return True
        return False

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        if self._is_compiled(node):
            self._compiled_depth += 1

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        if self._is_compiled(original_node):
            self._compiled_depth -= 1

    def _test(self, node: cst.CSTNode, test: cst.BaseExpression) -> None:
        if self._compiled_depth <= 0:
            return
        scan = _Scan()
        test.visit(scan)
        if scan.found:
            self.hit(node, "branch on a tensor value inside torch.compile: graph break",
                     suggestion="torch.where / torch.cond, or move the check outside the compiled function")

    def visit_If(self, node: cst.If) -> None:
        self._test(node.test, node.test)

    def visit_While(self, node: cst.While) -> None:
        self._test(node.test, node.test)


RULE = GraphBreaks
