"""FRY021 (streams.cuda-graphs): torch.cuda.CUDAGraph, torch.cuda.graph, make_graphed_callables ->
unsupported on tpx (run eagerly behind a flag); where the program has its own eager path beside the
capture (``if graphs: <capture> else: <eager>``), the capture is chosen on CUDA only.

``if graphs:`` -> ``if graphs and device.type == "cuda":`` (``if not graphs: <eager> else: <capture>``
-> ``if not graphs or device.type != "cuda":``): on CUDA the program's choice is unchanged; a device
without CUDA graphs runs the program's own eager code for the step (``tools/codemods/graph_branches.py``).
The graph API uses that only that branch reaches (in it, or in a module-level function called from such
branches only) are then review findings: they run on CUDA only. Capture without an eager ``else`` stays
unsupported.
"""

from __future__ import annotations

import libcst as cst

from tools.codemods.base import RuleContext
from tools.codemods.generic import NameReportRule
from tools.codemods.graph_branches import GraphBranch, capturing_functions, graph_branches, guarded_test
from tools.codemods.nodes import code, expr
from tools.codemods.tables import GRAPH_NAMES, Report


class _Calls(cst.CSTVisitor):
    """Every call of a plain name, and the node of each."""

    def __init__(self, names: frozenset[str]) -> None:
        self.names = names
        self.calls: list[cst.Call] = []

    def visit_Call(self, node: cst.Call) -> None:
        if isinstance(node.func, cst.Name) and node.func.value in self.names:
            self.calls.append(node)


class CudaGraphs(NameReportRule):
    ID = "FRY021"
    NAME = "streams.cuda-graphs"
    DESCRIPTION = ("torch.cuda.CUDAGraph, torch.cuda.graph, make_graphed_callables -> unsupported on tpx (run eagerly "
                   "behind a flag); an `if` whose one branch captures a graph and whose `else` is the program's "
                   "eager path -> capture on CUDA only (`if graphs and device.type == \"cuda\":`), the graph uses "
                   "only that branch reaches -> review.")
    CATEGORY = "unsupported"
    ENTRIES = (21,)
    NAMES = GRAPH_NAMES

    def __init__(self, ctx: RuleContext) -> None:
        super().__init__(ctx)
        self._branches: dict[int, GraphBranch] = {}
        self._cuda_only: set[int] = set()  # ids of the capture blocks and functions that run on CUDA only

    def _is_graph_name(self, node: cst.CSTNode) -> bool:
        return self.qname_in(node, GRAPH_NAMES) is not None and self.is_outermost_attribute(node)

    def visit_Module(self, node: cst.Module) -> None:
        branches = graph_branches(node, self._is_graph_name)
        self._branches = {id(b.node): b for b in branches}
        blocks = [b.node.body if b.captures_in_body else b.node.orelse for b in branches]
        self._cuda_only = {id(block) for block in blocks if block is not None}
        functions = capturing_functions(node, self._is_graph_name)
        calls = _Calls(functions)
        node.visit(calls)
        for function in (s for s in node.body if isinstance(s, cst.FunctionDef) and s.name.value in functions):
            sites = [c for c in calls.calls if c.func.value == function.name.value]  # type: ignore[attr-defined]
            if sites and all(self._inside(c, self._cuda_only) for c in sites):
                self._cuda_only.add(id(function))

    def _inside(self, node: cst.CSTNode, ids: set[int]) -> bool:
        parent = self.parent(node)
        while parent is not None:
            if id(parent) in ids:
                return True
            parent = self.parent(parent)
        return False

    def _report(self, node: cst.CSTNode, rep: Report) -> None:
        if self._inside(node, self._cuda_only):
            self.hit(node, f"{rep.message}: this code runs on CUDA only (the capture branch is chosen on CUDA only)",
                     category="review", suggestion=rep.suggestion)
            return
        super()._report(node, rep)

    def visit_If(self, node: cst.If) -> None:
        branch = self._branches.get(id(node))
        if branch is None:
            return
        device_type = self.device_type(node.test)
        in_body = branch.captures_in_body

        def transform(updated: cst.CSTNode) -> cst.CSTNode:
            assert isinstance(updated, cst.If)
            test = expr(guarded_test(code(updated.test), updated.test, in_body, device_type))
            return updated.with_changes(test=test)

        shown = guarded_test(code(node.test), node.test, in_body, device_type)
        self.hit(node, "the program chooses between CUDA graph capture and its own eager path here: on a device "
                       "without CUDA graphs the eager path runs (on CUDA the choice is unchanged)",
                 category="auto", suggestion=f"if {shown}:", transform=transform, needs_device=True)


RULE = CudaGraphs
