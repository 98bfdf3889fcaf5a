"""Integer device indices (catalogue entries 3, 58): which expressions hold a CUDA device *index*.

``x.cuda(local_rank)``, ``torch.zeros(2, device=rank)``, ``model.to(device)`` after ``device = 0``: an
integer where a device goes means a CUDA ordinal. Shared by FRY055, which maps such indices to the
accelerator's device with that index, and FRY002/FRY003, which leave those sites to it.

What counts as an index, from the module's text alone (no types):

* a name every binding of which in the module is an integer: ``0`` (other literals are another ordinal,
  which the target may not have: FRY002/FRY003 report those), ``int(...)`` (``int(os.environ["LOCAL_RANK"])``)
  or a parameter annotated ``int``. One binding of another kind anywhere in the module (a tuple target, a
  loop variable, a parameter without annotation, ``device = x.device``) and the name is not one;
* ``int(...)`` itself;
* where the place takes only a device (a ``.cuda(...)`` argument, ``device=``/``map_location=``, not the
  positional argument of ``.to``, which also takes dtypes and tensors): a name or attribute that says
  rank (``local_rank``, ``args.gpu``, ``self.device_id``) and an item of a list of them
  (``device_ids[0]``, ``args.gpus[rank]``), unless the module binds that name to a non-zero literal;
* also as the positional argument of ``.to`` (the DDP tutorials' ``model.to(rank)``,
  ``source.to(self.gpu_id)``, ``labels.to(device_ids[0])``): a name or attribute that can only mean an
  ordinal (``rank``, ``local_rank``, ``gpu_id``: not ``gpu`` or ``device_id``, which may hold a device)
  and an item of a list of device ids, unless the module assigns that name (or attribute) anything but an
  integer (``gpu_id = torch.device(...)``).
"""

from __future__ import annotations

import re

import libcst as cst

from tools.codemods.base import RuleContext

#: the rule that maps indices held in variables
INDEX_RULE = "FRY055"
#: names that hold a device index by convention
RANK_NAME = re.compile(r"(^|_)(local_rank|rank|gpu|gpu_id|gpu_idx|device_id|cuda_id|gpu_index)$", re.I)
#: names that can only hold an ordinal (the positional argument of ``.to`` also takes devices and dtypes)
ORDINAL_NAME = re.compile(r"(^|_)(local_rank|rank|gpu_id|gpu_idx|gpu_index|cuda_id|local_gpu)$", re.I)
#: lists that can only hold ordinals (``devices`` may hold torch.device objects)
_ID_LIST = re.compile(r"(^|_)(device_ids|gpu_ids|gpus)$", re.I)
#: lists of device indices (``device_ids[0]``)
_INDEX_LIST = re.compile(r"(^|_)(device_ids|gpus|gpu_ids|devices)$", re.I)


class _Bindings(cst.CSTVisitor):
    """Per name: whether all its bindings are integer (``0``/``int(...)``/``: int``), and the names bound to
    a non-zero integer literal."""

    def __init__(self) -> None:
        self.kinds: dict[str, bool] = {}
        self.nonzero: set[str] = set()
        #: names and attributes (``self.gpu_id``: ``gpu_id``) assigned a value that is not an integer
        self.other: set[str] = set()

    def _bind(self, name: str, is_int: bool) -> None:
        self.kinds[name] = self.kinds.get(name, True) and is_int

    def _int_value(self, name: str, value: cst.BaseExpression | None) -> bool:
        if isinstance(value, cst.Integer):
            if int(value.evaluated_value) != 0:
                self.nonzero.add(name)
                return False
            return True
        return isinstance(value, cst.Call) and isinstance(value.func, cst.Name) and value.func.value == "int"

    def _targets(self, node: cst.CSTNode) -> None:
        """Every name bound by an assignment target (tuples, stars), as not an integer."""
        if isinstance(node, cst.Name):
            self._bind(node.value, False)
        elif isinstance(node, (cst.Tuple, cst.List)):
            for element in node.elements:
                self._targets(element.value)
        elif isinstance(node, cst.StarredElement):
            self._targets(node.value)

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            if isinstance(target.target, cst.Name):
                is_int = self._int_value(target.target.value, node.value)
                self._bind(target.target.value, is_int)
                if not is_int and not isinstance(node.value, (cst.Name, cst.Attribute, cst.Subscript)):
                    self.other.add(target.target.value)
            elif isinstance(target.target, cst.Attribute):
                if not isinstance(node.value, (cst.Integer, cst.Name, cst.Attribute, cst.Subscript, cst.Call)) or (
                        isinstance(node.value, cst.Call) and not (isinstance(node.value.func, cst.Name)
                                                                  and node.value.func.value == "int")):
                    self.other.add(target.target.attr.value)
            else:
                self._targets(target.target)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if isinstance(node.target, cst.Name):
            annotated = isinstance(node.annotation.annotation, cst.Name) and node.annotation.annotation.value == "int"
            value_ok = node.value is None or self._int_value(node.target.value, node.value)
            self._bind(node.target.value, annotated and value_ok)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._targets(node.target)

    def visit_For(self, node: cst.For) -> None:
        self._targets(node.target)

    def visit_CompFor(self, node: cst.CompFor) -> None:
        self._targets(node.target)

    def visit_AsName(self, node: cst.AsName) -> None:
        self._targets(node.name)

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self._targets(node.target)

    def visit_Param(self, node: cst.Param) -> None:
        ann = node.annotation.annotation if node.annotation is not None else None
        self._bind(node.name.value, isinstance(ann, cst.Name) and ann.value == "int")

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._bind(node.name.value, False)

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self._bind(node.name.value, False)

    def visit_ImportAlias(self, node: cst.ImportAlias) -> None:
        bound: cst.BaseExpression = node.asname.name if node.asname is not None else node.name
        while isinstance(bound, cst.Attribute):
            bound = bound.value
        if isinstance(bound, cst.Name):
            self._bind(bound.value, False)


def _analysis(ctx: RuleContext) -> tuple[frozenset[str], frozenset[str], frozenset[str], frozenset[str]]:
    """(names bound only to integers, names bound to a non-zero literal, every name the module binds, names
    and attributes assigned something other than an integer), computed once per module."""
    if ctx.int_names is None:
        bindings = _Bindings()
        if ctx.module is not None:
            ctx.module.visit(bindings)
        ctx.int_names = (frozenset(n for n, ok in bindings.kinds.items() if ok), frozenset(bindings.nonzero),
                         frozenset(bindings.kinds), frozenset(bindings.other))
    return ctx.int_names


def _last_name(node: cst.CSTNode) -> str | None:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        return node.attr.value
    return None


def left_to_index_rule(node: cst.CSTNode, ctx: RuleContext, *, device_only: bool) -> bool:
    """Whether FRY002/FRY003 leave ``node`` (an index) to FRY055: it is an index and FRY055 runs in this pass."""
    return INDEX_RULE in ctx.running_rules and is_device_index(node, ctx, device_only=device_only)


def is_device_index(node: cst.CSTNode, ctx: RuleContext, *, device_only: bool) -> bool:
    """Whether ``node`` holds a CUDA device index (see the module docstring); ``device_only`` where the place
    takes nothing but a device (``.cuda(...)``, ``device=``, ``map_location=``)."""
    ints, nonzero, bound, other = _analysis(ctx)
    if isinstance(node, cst.Name) and node.value in ints:
        return True
    if (isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value == "int"
            and "int" not in bound):  # a user's own ``int`` would not be the builtin
        return True
    if not device_only:
        return _ordinal(node, nonzero | other)
    return _named_index(node, RANK_NAME, _INDEX_LIST, nonzero)


def _ordinal(node: cst.CSTNode, excluded: frozenset[str]) -> bool:
    """A name or attribute that can only mean an ordinal, or an item of a list of device ids (see the module
    docstring), where ``.to`` also takes devices and dtypes."""
    return _named_index(node, ORDINAL_NAME, _ID_LIST, excluded)


def _named_index(node: cst.CSTNode, names: re.Pattern[str], lists: re.Pattern[str], excluded: frozenset[str]) -> bool:
    """A name matching ``names`` (not in ``excluded``), or an item of a list whose name matches ``lists``."""
    name = _last_name(node)
    if name is not None:
        return names.search(name) is not None and name not in excluded
    if isinstance(node, cst.Subscript) and len(node.slice) == 1:
        listed = _last_name(node.value)
        return listed is not None and lists.search(listed) is not None
    return False
