"""Loop context for the performance rules: is a node inside a training loop?"""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst

_TRAINING_CALLS = frozenset({"backward", "step", "zero_grad"})


class _FindTraining(cst.CSTVisitor):
    def __init__(self) -> None:
        super().__init__()
        self.found = False

    def visit_Call(self, node: cst.Call) -> bool:
        if isinstance(node.func, cst.Attribute) and node.func.attr.value in _TRAINING_CALLS:
            self.found = True
        return not self.found


class LoopTracker:
    """Remembers, per loop node, whether its body trains (calls backward/step/zero_grad)."""

    def __init__(self) -> None:
        self._cache: dict[int, bool] = {}

    def is_training_loop(self, loop: cst.CSTNode) -> bool:
        key = id(loop)
        if key not in self._cache:
            finder = _FindTraining()
            loop.visit(finder)
            self._cache[key] = finder.found
        return self._cache[key]


def enclosing_loop(node: cst.CSTNode, parent_of: Callable[[cst.CSTNode], cst.CSTNode | None]) -> cst.CSTNode | None:
    """Nearest For/While around ``node`` within the same function, else None."""
    current = parent_of(node)
    while current is not None and not isinstance(current, (cst.FunctionDef, cst.ClassDef, cst.Module, cst.Lambda)):
        if isinstance(current, (cst.For, cst.While)):
            return current
        current = parent_of(current)
    return None
