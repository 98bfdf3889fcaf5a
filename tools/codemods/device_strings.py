"""Predicates on a device held as a string (CUDA_IDIOMS 53/54): ``'cuda' in device``,
``device.startswith('cuda')`` and ``'cuda' if <one of those> else 'cpu'``.

Shared by FRY053, which rewrites them, and FRY001, which leaves their "cuda" literal to it. Only
subjects whose name says they hold a device (``device``, ``args.device``, ``self.device_name``) count:
``'cuda' in backends`` (a list) is not a device test.
"""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst

from tools.codemods.nodes import cuda_device_string

Parents = Callable[[cst.CSTNode], cst.CSTNode | None]


def _bare_cuda(node: cst.CSTNode | None) -> bool:
    """The literal "cuda" itself (no ordinal): what `in` and `startswith` test for."""
    is_cuda, ordinal = cuda_device_string(node)
    return is_cuda and ordinal is None


def device_subject(node: cst.CSTNode) -> bool:
    """A name or attribute that holds a device by its name (``device``, ``args.device``, ``cfg.device_type``)."""
    if isinstance(node, cst.Name):
        ident = node.value
    elif isinstance(node, cst.Attribute):
        ident = node.attr.value
    else:
        return False
    return "device" in ident.lower()


def predicate_subject(node: cst.CSTNode) -> tuple[cst.BaseExpression, bool] | None:
    """(the device string tested, whether the test is negated) for ``'cuda' in X`` / ``'cuda' not in X`` /
    ``X.startswith('cuda')``; None for anything else."""
    if isinstance(node, cst.Comparison) and len(node.comparisons) == 1 and _bare_cuda(node.left):
        target = node.comparisons[0]
        if isinstance(target.operator, (cst.In, cst.NotIn)) and device_subject(target.comparator):
            return target.comparator, isinstance(target.operator, cst.NotIn)
    if (isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "startswith"
            and len(node.args) == 1 and node.args[0].keyword is None and node.args[0].star == ""
            and _bare_cuda(node.args[0].value) and device_subject(node.func.value)):
        return node.func.value, False
    return None


def is_device_type_choice(node: cst.CSTNode) -> bool:
    """``'cuda' if <predicate on a device string> else 'cpu'``: the device's type, CUDA or CPU."""
    if not isinstance(node, cst.IfExp) or not _bare_cuda(node.body):
        return False
    orelse = node.orelse
    if not (isinstance(orelse, cst.SimpleString) and orelse.value.strip("'\"") == "cpu"):
        return False
    subject = predicate_subject(node.test)
    return subject is not None and not subject[1]


def is_device_string_predicate_part(node: cst.CSTNode, parent: cst.CSTNode | None, parent_of: Parents) -> bool:
    """Whether the "cuda" literal ``node`` is the one a device-string predicate tests for (FRY053's)."""
    if isinstance(parent, cst.Comparison):
        return predicate_subject(parent) is not None
    if isinstance(parent, cst.Arg):
        call = parent_of(parent)
        return call is not None and predicate_subject(call) is not None
    return False
