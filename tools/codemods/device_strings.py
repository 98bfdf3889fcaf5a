"""Predicates on a device held as a string (CUDA_IDIOMS 53/54): ``'cuda' in device``,
``device.startswith('cuda')``, ``device_type == 'cuda'`` and ``'cuda' if <one of those> else 'cpu'``.

Shared by FRY053, which rewrites them, and FRY001, which leaves their "cuda" literal to it. Only
subjects whose name says they hold a device (``device``, ``args.device``, ``self.device_name``) count:
``'cuda' in backends`` (a list) is not a device test.
"""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst

from tools.codemods.nodes import cuda_device_string, string_value

Parents = Callable[[cst.CSTNode], cst.CSTNode | None]


def _bare_cuda(node: cst.CSTNode | None) -> bool:
    """The literal "cuda" itself (no ordinal): what `in` and `startswith` test for."""
    is_cuda, ordinal = cuda_device_string(node)
    return is_cuda and ordinal is None


def device_subject(node: cst.CSTNode) -> bool:
    """A name, attribute or string-keyed item that holds a device by its name (``device``, ``args.device``,
    ``cfg.device_type``, ``g["device_type"]``). ``x.device.type`` is not one: its CUDA comparisons stay
    review (FRY001)."""
    if isinstance(node, cst.Name):
        ident: str | None = node.value
    elif isinstance(node, cst.Attribute):
        ident = node.attr.value
    elif (isinstance(node, cst.Subscript) and len(node.slice) == 1
          and isinstance(node.slice[0].slice, cst.Index)):
        ident = string_value(node.slice[0].slice.value)
    else:
        return False
    return ident is not None and "device" in ident.lower()


def predicate_subject(node: cst.CSTNode) -> tuple[cst.BaseExpression, bool] | None:
    """(the device string tested, whether the test is negated) for ``'cuda' in X`` / ``'cuda' not in X`` /
    ``X.startswith('cuda')`` / ``X == 'cuda'`` / ``X != 'cuda'``; None for anything else."""
    if isinstance(node, cst.Comparison) and len(node.comparisons) == 1:
        target = node.comparisons[0]
        if (_bare_cuda(node.left) and isinstance(target.operator, (cst.In, cst.NotIn))
                and device_subject(target.comparator)):
            return target.comparator, isinstance(target.operator, cst.NotIn)
        if (_bare_cuda(target.comparator) and isinstance(target.operator, (cst.Equal, cst.NotEqual))
                and device_subject(node.left)):
            return node.left, isinstance(target.operator, cst.NotEqual)
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
    if isinstance(parent, cst.ComparisonTarget):
        parent = parent_of(parent)
    if isinstance(parent, cst.Comparison):
        return predicate_subject(parent) is not None
    if isinstance(parent, cst.Arg):
        call = parent_of(parent)
        return call is not None and predicate_subject(call) is not None
    return False
