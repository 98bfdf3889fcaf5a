"""Capability branches (catalogue 12): where a CUDA compute capability decides something, and what
a device that is not CUDA should decide there.

``torch.cuda.get_device_capability()`` answers in CUDA's terms (``(8, 0)`` for sm_80); off CUDA the
question has no meaning (tpx answers ``(1, 0)``), so a comparison of it would send every other device
down the branch of the oldest GPUs. What such a test guards is a feature of newer GPUs (bf16, fused
attention kernels, TF32): on a device that is not CUDA the rewrite keeps the test for CUDA only and
takes the branch of current GPUs, except where the branch picks ``torch.bfloat16``: there it asks
the device whether it supports bf16 (unless the same test already asks).

This module finds those comparisons; FRY012 (``rules/fry012_device_properties.py``) rewrites them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import libcst as cst

Direction = Literal["newer", "older"]

_NEWER_WHEN_LEFT = (cst.GreaterThan, cst.GreaterThanEqual)
_OLDER_WHEN_LEFT = (cst.LessThan, cst.LessThanEqual)


@dataclass(frozen=True)
class CapabilityTest:
    """A comparison of a capability value with a constant; ``direction`` is what True means."""

    node: cst.Comparison
    direction: Direction | None  # None: == / != / chained / not a constant: the intent is unclear


def _is_constant(node: cst.BaseExpression) -> bool:
    if isinstance(node, cst.Integer):
        return True
    if isinstance(node, cst.Tuple):
        return bool(node.elements) and all(isinstance(e.value, cst.Integer) for e in node.elements)
    return False


def comparison_test(comparison: cst.Comparison, operand: cst.CSTNode) -> CapabilityTest:
    """What ``comparison`` tests, ``operand`` (one of its sides) being the capability value."""
    if len(comparison.comparisons) != 1:
        return CapabilityTest(comparison, None)
    target = comparison.comparisons[0]
    left = comparison.left is operand
    other = target.comparator if left else comparison.left
    if not _is_constant(other):
        return CapabilityTest(comparison, None)
    op = target.operator
    if isinstance(op, _NEWER_WHEN_LEFT):
        return CapabilityTest(comparison, "newer" if left else "older")
    if isinstance(op, _OLDER_WHEN_LEFT):
        return CapabilityTest(comparison, "older" if left else "newer")
    return CapabilityTest(comparison, None)


def unpacked_names(target: cst.BaseAssignTargetExpression) -> list[tuple[str, bool]]:
    """(name, is_whole) for ``cap = ...`` (the whole tuple) or ``major, minor = ...`` (the parts)."""
    if isinstance(target, cst.Name):
        return [(target.value, True)]
    if isinstance(target, (cst.Tuple, cst.List)):
        return [(e.value.value, False) for e in target.elements
                if isinstance(e, cst.Element) and isinstance(e.value, cst.Name) and e.value.value != "_"]
    return []


class _Mentions(cst.CSTVisitor):
    def __init__(self, attrs: frozenset[str]) -> None:
        self.attrs = attrs
        self.found = False

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        if node.attr.value in self.attrs:
            self.found = True
        return not self.found

    def visit_Name(self, node: cst.Name) -> bool:
        if node.value in self.attrs:
            self.found = True
        return False


def mentions(node: cst.CSTNode, *names: str) -> bool:
    """Whether ``node`` spells one of ``names`` as a name or attribute (``torch.bfloat16``, ``is_bf16_supported``)."""
    finder = _Mentions(frozenset(names))
    node.visit(finder)
    return finder.found


def guarded_text(test: str, direction: Direction, device_type: str, bf16: str | None) -> str:
    """The comparison ``test`` kept for CUDA; elsewhere the branch of current GPUs, or ``bf16``'s answer."""
    if bf16 is None:
        if direction == "newer":
            return f'{device_type} != "cuda" or {test}'
        return f'{device_type} == "cuda" and {test}'
    other = bf16 if direction == "newer" else f"not {bf16}"
    return f'{test} if {device_type} == "cuda" else {other}'
