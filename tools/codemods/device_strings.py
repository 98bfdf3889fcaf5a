"""Predicates on a device held as a string (catalogue entries 53/54): ``'cuda' in device``,
``device.startswith('cuda')``, ``device_type == 'cuda'`` and ``'cuda' if <one of those> else 'cpu'``.

Shared by FRY053, which rewrites them, and FRY001, which leaves their "cuda" literal to it. Only
subjects whose name says they hold a device (``device``, ``args.device``, ``self.device_name``) count:
``'cuda' in backends`` (a list) is not a device test.
"""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst

from tools.codemods.nodes import cuda_device_string, dotted, positional, string_value

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


def type_comparison_subject(node: cst.CSTNode) -> tuple[cst.BaseExpression, bool] | None:
    """(the ``.type`` attribute compared, whether the test is negated) for ``<x>.type == "cuda"`` /
    ``<x>.type != "cuda"`` (either side): a device's type compared with CUDA's by name (FRY062's);
    None for anything else. ``device_type == "cuda"`` (a device string by its name) is FRY053's."""
    if not isinstance(node, cst.Comparison) or len(node.comparisons) != 1:
        return None
    target = node.comparisons[0]
    if not isinstance(target.operator, (cst.Equal, cst.NotEqual)):
        return None
    negated = isinstance(target.operator, cst.NotEqual)
    for subject, literal in ((node.left, target.comparator), (target.comparator, node.left)):
        if (_bare_cuda(literal) and isinstance(subject, cst.Attribute) and subject.attr.value == "type"
                and not device_subject(subject)):
            return subject, negated
    return None


def is_type_comparison_part(node: cst.CSTNode, parent: cst.CSTNode | None, parent_of: Parents) -> bool:
    """Whether the "cuda" literal ``node`` is the one a ``<x>.type == "cuda"`` comparison tests for."""
    comparison = parent_of(parent) if isinstance(parent, cst.ComparisonTarget) else parent
    return comparison is not None and type_comparison_subject(comparison) is not None


#: call names (the last component) whose string arguments are not devices: text, names, keys, messages
NOT_DEVICE_CALLS = frozenset({
    "print", "getattr", "hasattr", "setattr", "delattr", "isinstance", "issubclass", "str", "repr", "format",
    "len", "open", "eval", "exec", "vars", "type", "import_module", "__import__", "find_spec",
    "get", "pop", "setdefault", "startswith", "endswith", "replace", "split", "rsplit", "join", "find", "rfind",
    "index", "count", "strip", "lstrip", "rstrip", "partition", "rpartition", "append", "extend", "insert",
    "remove", "add", "discard", "encode", "__contains__", "match", "fullmatch", "search", "sub", "compile",
    "fnmatch", "debug", "info", "warning", "warn", "error", "exception", "critical", "log", "write",
    "skip", "fail", "xfail", "importorskip", "skipif", "add_argument", "add_parser", "add_argument_group",
    "getenv", "putenv", "parametrize", "register", "Path",
})
#: keywords whose "cuda" value other rules own (FRY004 device=, FRY005 map_location=, device-type rules)
_OTHER_RULES_KEYWORDS = frozenset({"device", "map_location", "device_type", "default", "dest"})
#: device names a list of devices holds beside "cpu" (pytest parametrisations, loops over devices)
_DEVICE_NAMES = frozenset({"cpu", "cuda", "mps", "xpu", "meta", "hip", "xla", "tpx", "privateuseone"})


def _device_keyword(name: str) -> bool:
    return name not in _OTHER_RULES_KEYWORDS and ("device" in name.lower() or name == "dev")


def _device_list_element(element: cst.BaseElement) -> bool:
    value = element.value
    text = string_value(value)
    if text is not None:
        return text.split(":", 1)[0] in _DEVICE_NAMES
    # pytest.param("cuda", marks=...): its "cuda" is an argument of its own
    return isinstance(value, cst.Call) and (dotted(value.func) or "").rsplit(".", 1)[-1] == "param"


def _device_list(node: cst.CSTNode, parent_of: Parents) -> bool:
    """``node`` is a list or tuple of device names that holds "cpu" (``["cpu", "cuda"]``), not an
    option's ``choices=`` (the command line's vocabulary, FRY054's area)."""
    if not isinstance(node, (cst.List, cst.Tuple)) or not node.elements:
        return False
    if not all(_device_list_element(e) for e in node.elements):
        return False
    if not any(string_value(e.value) == "cpu" for e in node.elements):
        return False
    holder = parent_of(node)
    return not (isinstance(holder, cst.Arg) and holder.keyword is not None and holder.keyword.value == "choices")


def argument_literal(node: cst.CSTNode, parent: cst.CSTNode | None, parent_of: Parents) -> bool:
    """Whether the "cuda"/"cuda:0" literal ``node`` is a device handed to code (FRY061's): a positional
    argument of a call that is not text handling (``grid(nx, "cuda")``, not ``print("cuda")``; ``.to("cuda")``
    is FRY001's), a device-like keyword other rules do not own (``target_device="cuda"``), or an element of a
    list or tuple of device names beside "cpu" (``parametrize("device", ["cpu", "cuda"])``). Syntactic: the
    caller also leaves calls that other rules own (torch.device, autocast) to them."""
    is_cuda, ordinal = cuda_device_string(node)
    if not is_cuda or ordinal not in (None, 0):
        return False
    if isinstance(parent, cst.Element):
        return _device_list(parent_of(parent) or parent, parent_of)
    if not isinstance(parent, cst.Arg) or parent.star:
        return False
    call = parent_of(parent)
    if not isinstance(call, cst.Call) or isinstance(call.func, (cst.SimpleString, cst.FormattedString)):
        return False
    if isinstance(call.func, cst.Attribute) and isinstance(call.func.value, (cst.SimpleString,
                                                                             cst.FormattedString)):
        return False  # "...".format("cuda")
    name = (dotted(call.func) or "").rsplit(".", 1)[-1]
    if not name or name in NOT_DEVICE_CALLS or predicate_subject(call) is not None:
        return False
    if parent.keyword is not None:
        return _device_keyword(parent.keyword.value)
    first = positional(call)[:1]
    return not (name == "to" and bool(first) and first[0] is parent)  # FRY001: .to("cuda") -> the device variable
