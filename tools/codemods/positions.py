"""Source positions of a few nodes of a module, the ones that become findings.

libcst's ``PositionProvider`` generates the module's code once and records a range for every node
(a context manager and two ``CodeRange`` objects per node). Ferry only asks where its findings are:
:func:`positions_of` generates the code once too (positions depend on all the text before a node) but
records ranges only inside the subtrees of the nodes asked for, with the same rules as libcst's
provider (a node's syntactic range, hoisted from its first/last child where libcst does that, else
the range including its whitespace), so every range is the one ``PositionProvider`` gives.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import libcst as cst
from libcst.metadata import CodeRange
from libcst.metadata.position_provider import PositionProvidingCodegenState

_NOTHING: AbstractContextManager[None] = nullcontext()


class _Recorder:
    """Stands in for the metadata provider that the codegen state writes its ranges into."""

    def __init__(self) -> None:
        self._computed: dict[cst.CSTNode, CodeRange] = {}


class _SomeNodesState(PositionProvidingCodegenState):
    """libcst's position-recording codegen state, recording only inside the wanted subtrees (a node's
    range may be hoisted from its children, so a wanted node's whole subtree is recorded)."""

    def __init__(self, module: cst.Module, wanted: Collection[int]) -> None:
        super().__init__(default_indent=module.default_indent, default_newline=module.default_newline,
                         provider=_Recorder())  # type: ignore[arg-type]
        self.wanted = wanted
        self.inside = 0

    def before_codegen(self, node: cst.CSTNode) -> None:
        if id(node) in self.wanted:
            self.inside += 1
        if self.inside:
            super().before_codegen(node)

    def after_codegen(self, node: cst.CSTNode) -> None:
        if self.inside:
            super().after_codegen(node)
        if id(node) in self.wanted:
            self.inside -= 1

    def record_syntactic_position(  # type: ignore[override]  # a plain context manager where nothing is recorded
            self, node: cst.CSTNode, *, start_node: cst.CSTNode | None = None,
            end_node: cst.CSTNode | None = None) -> AbstractContextManager[None]:
        if not self.inside:
            return _NOTHING
        return super().record_syntactic_position(node, start_node=start_node, end_node=end_node)


def positions_of(module: cst.Module, nodes: Collection[cst.CSTNode]) -> dict[cst.CSTNode, CodeRange]:
    """``PositionProvider``'s range for each of ``nodes`` (nodes of ``module``)."""
    if not nodes:
        return {}
    state = _SomeNodesState(module, {id(n) for n in nodes})
    module._codegen(state)
    computed: Mapping[Any, Any] = state.provider._computed
    return {n: computed[n] for n in nodes}

