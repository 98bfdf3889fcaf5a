"""The program's own choice between CUDA graph capture and eager execution (catalogue 21).

Code that captures a step in a CUDA graph usually keeps an eager path beside it: ``if graphs: <capture
and replay> else: <the same step, eagerly>`` (a ``--graphs/--no-graphs`` option, a ``use_cuda_graphs``
setting). A device without CUDA graphs can run that eager path; on CUDA the choice stays the
program's. This module finds such ``if`` statements: one branch captures a graph (it names one of the
graph APIs, or calls a module-level function that does) and the ``else`` branch does not.

The eager branch is the program's own code for the same work, so it reads its own inputs and writes
its own results: unlike an eager stand-in for ``replay()``, nothing has to keep static buffers in step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import libcst as cst

#: whether a Name/Attribute node is one of the CUDA graph APIs (resolved by the calling rule)
IsGraphName = Callable[[cst.CSTNode], bool]


@dataclass(frozen=True)
class GraphBranch:
    """An ``if`` with an ``else`` where exactly one branch captures a CUDA graph."""

    node: cst.If
    captures_in_body: bool  # False: the ``else`` branch captures, the body is the eager path


class _Finder(cst.CSTVisitor):
    def __init__(self, is_graph_name: IsGraphName, functions: frozenset[str]) -> None:
        self.is_graph_name = is_graph_name
        self.functions = functions
        self.found = False

    def on_visit(self, node: cst.CSTNode) -> bool:
        if self.found:
            return False
        if isinstance(node, (cst.Name, cst.Attribute)) and self.is_graph_name(node):
            self.found = True
        elif isinstance(node, cst.Call) and isinstance(node.func, cst.Name):
            self.found = node.func.value in self.functions  # a call of a function that captures
        return not self.found


def captures(node: cst.CSTNode, is_graph_name: IsGraphName, functions: frozenset[str] = frozenset()) -> bool:
    finder = _Finder(is_graph_name, functions)
    node.visit(finder)
    return finder.found


def capturing_functions(module: cst.Module, is_graph_name: IsGraphName) -> frozenset[str]:
    """Module-level functions whose own body names a graph API (``def capture_step(...)``)."""
    return frozenset(s.name.value for s in module.body
                     if isinstance(s, cst.FunctionDef) and captures(s.body, is_graph_name))


class _Ifs(cst.CSTVisitor):
    def __init__(self) -> None:
        self.found: list[cst.If] = []

    def visit_If(self, node: cst.If) -> None:
        if isinstance(node.orelse, cst.Else):
            self.found.append(node)


def graph_branches(module: cst.Module, is_graph_name: IsGraphName) -> list[GraphBranch]:
    functions = capturing_functions(module, is_graph_name)
    ifs = _Ifs()
    module.visit(ifs)
    found = []
    for node in ifs.found:
        assert isinstance(node.orelse, cst.Else)
        body = captures(node.body, is_graph_name, functions)
        other = captures(node.orelse.body, is_graph_name, functions)
        if body != other and not captures(node.test, is_graph_name, functions) and not names_cuda(node.test):
            found.append(GraphBranch(node, captures_in_body=body))
    return found


class _CudaString(cst.CSTVisitor):
    def __init__(self) -> None:
        self.found = False

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        self.found = self.found or node.evaluated_value == "cuda"


def names_cuda(test: cst.BaseExpression) -> bool:
    """Whether the test compares with "cuda" already (it asks for the device: e.g. a rewrite done before)."""
    finder = _CudaString()
    test.visit(finder)
    return finder.found


_SIMPLE = (cst.Name, cst.Attribute, cst.Call, cst.Subscript, cst.Comparison, cst.UnaryOperation)


def guarded_test(test: str, test_node: cst.BaseExpression, captures_in_body: bool, device_type: str) -> str:
    """The test with capture chosen on CUDA only (the eager branch everywhere else)."""
    keep = isinstance(test_node, _SIMPLE) or (
        isinstance(test_node, cst.BooleanOperation) and isinstance(test_node.operator, cst.And) == captures_in_body)
    text = test if keep or test_node.lpar else f"({test})"
    return f'{text} and {device_type} == "cuda"' if captures_in_body else f'{text} or {device_type} != "cuda"'
