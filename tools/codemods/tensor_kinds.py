"""A small, deliberately conservative guess of what an expression holds: a tensor, a module,
a module class, or something else (None).

Used by FRY050 to tell ``print(loss)`` (formats a device tensor: a host sync) from
``print(step)`` or ``print(model)`` (no device data). Names are resolved through libcst's
scope analysis; a name is a tensor when ANY of its bindings in scope is one. The evidence that
makes something a tensor:

* a call of a tensor-returning torch function (``torch.*`` functions, ``torch.nn.functional``,
  ``torch.linalg``, ``torch.fft``, ``torch.special``; not ``torch.is_*``/``get_*``/``set_*``,
  ``torch.load`` or other non-tensor helpers, not ``torch.optim``/``utils``/``cuda``/...);
* a call of a module (``torch.nn.Linear(...)``, ``torch.compile(...)``, an instance of a class
  deriving from a torch class) or of its ``forward``; ``state_dict()`` (prints tensors);
* a tensor method other than the ones returning Python values (``item``, ``tolist``, ``size``,
  ``numel``, ``cpu``, ``numpy``...: those are reported by FRY050 itself or hold no device data);
* arithmetic, comparisons, indexing, conditional expressions and list/tuple/dict displays
  with a tensor operand; tensor attributes ``grad``/``data``/``T``; a module's ``weight``/``bias``
  (other attributes of a module are taken as submodules: ``model.fc.weight``);
* a name whose ``.backward()`` is called, a parameter annotated ``torch.Tensor``, the loop
  variable of ``for p in m.parameters()``.

Anything else (loop counters, strings, ``loss.item()`` results, function parameters without
evidence, ``x.shape``) is None, so prints of plain Python values are never reported. Tensors
made on the host (a torch factory such as ``torch.zeros``/``arange``/``tensor`` without
``device=``, ``torch.from_numpy``: ``tools.codemods.tables.TENSOR_FACTORIES``, and what is computed
from them alone) are "host" (a ``*_like`` factory's is its input's kind): printing them does not
sync the device; ``.cuda()``/``.to(device)`` makes them device tensors.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import libcst as cst
from libcst.metadata import Assignment, ScopeProvider

from tools.codemods.tables import LIKE_FACTORIES, TENSOR_FACTORIES

if TYPE_CHECKING:
    from tools.codemods.base import CodemodRule


#: "tensor": a tensor that may live on the device; "host": one created on the CPU (a factory
#: without ``device=``, ``from_numpy``) and not moved since: printing it does not sync the device
Kind = Literal["tensor", "host", "module", "module_class"] | None
_MOVES = frozenset({"cuda", "to"})

_TENSOR_NAMESPACES = ("torch.nn.functional.", "torch.linalg.", "torch.fft.", "torch.special.", "torch.nn.init.")
_NON_TENSOR_TORCH_FUNCS = frozenset({
    "manual_seed", "seed", "initial_seed", "numel", "typename", "save", "load", "no_grad", "enable_grad",
    "inference_mode", "autocast", "device", "broadcast_shapes", "result_type", "promote_types", "can_cast",
    "compiled_with_cxx11_abi", "from_numpy_dtype", "cond", "vmap", "export",
})
_MODULE_TORCH_FUNCS = frozenset({"torch.compile", "torch.jit.script", "torch.jit.trace"})
_TENSOR_CLASSES = frozenset({"torch.nn.Parameter", "torch.nn.parameter.Parameter", "torch.Tensor"})
#: tensor methods whose result holds no device data (or is reported by FRY050 as a sync itself)
_NON_TENSOR_METHODS = frozenset({
    "item", "tolist", "cpu", "numpy", "size", "dim", "numel", "nelement", "ndimension", "element_size",
    "data_ptr", "stride", "storage_offset", "get_device", "is_contiguous", "is_floating_point", "is_complex",
    "equal", "allclose", "backward", "register_hook", "untyped_storage", "storage", "type", "__len__",
    "is_pinned", "is_shared", "has_names", "is_set_to", "is_nonzero",
})
_MODULE_METHODS = frozenset({
    "to", "cuda", "cpu", "half", "float", "double", "bfloat16", "train", "eval", "requires_grad_", "type",
    "to_empty", "share_memory",
})
_MODULE_TENSOR_METHODS = frozenset({"forward", "state_dict"})
_NON_TENSOR_ATTRS = frozenset({
    "shape", "dtype", "device", "ndim", "requires_grad", "is_cuda", "is_leaf", "names", "layout", "is_sparse",
    "is_quantized", "is_meta", "grad_fn", "training", "itemsize", "nbytes",
})
_TENSOR_ATTRS = frozenset({"grad", "data", "T", "mT", "H", "mH", "real", "imag"})
_MODULE_TENSOR_ATTRS = frozenset({"weight", "bias"})
_MAX_DEPTH = 24


class TensorKinds:
    """Per-rule, per-module memo of expression kinds (the rule supplies the metadata)."""

    def __init__(self, rule: CodemodRule) -> None:
        self.rule = rule
        self._bindings: dict[int, Kind] = {}

    # -- expressions ---------------------------------------------------------------------
    def is_tensor(self, node: cst.CSTNode) -> bool:
        """A tensor that may live on the device (host-created tensors are not reported)."""
        return self.kind(node) == "tensor"

    def _combine(self, nodes, d: int) -> Kind:  # type: ignore[no-untyped-def]
        kinds = {self.kind(n, d) for n in nodes}
        return "tensor" if "tensor" in kinds else ("host" if "host" in kinds else None)

    def kind(self, node: cst.CSTNode, depth: int = 0) -> Kind:
        if depth > _MAX_DEPTH:
            return None
        d = depth + 1
        if isinstance(node, cst.Name):
            return self._name_kind(node, d)
        if isinstance(node, cst.Call):
            return self._call_kind(node, d)
        if isinstance(node, cst.Attribute):
            return self._attribute_kind(node, d)
        if isinstance(node, cst.BinaryOperation):
            if isinstance(node.operator, cst.Modulo) and isinstance(
                    node.left, (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString)):
                return None  # "%s" % t is text (FRY050 reports the formatted tensor itself)
            return self._combine((node.left, node.right), d)
        if isinstance(node, cst.Comparison):
            if any(isinstance(c.operator, (cst.Is, cst.IsNot, cst.In, cst.NotIn)) for c in node.comparisons):
                return None
            return self._combine([node.left, *(c.comparator for c in node.comparisons)], d)
        if isinstance(node, cst.UnaryOperation):
            if isinstance(node.operator, cst.Not):
                return None
            return self._combine((node.expression,), d)
        if isinstance(node, cst.Subscript):
            inner = self.kind(node.value, d)
            return inner if inner in ("tensor", "host", "module") else None
        if isinstance(node, cst.IfExp):
            return self._combine((node.body, node.orelse), d)
        if isinstance(node, (cst.List, cst.Tuple, cst.Set)):
            return self._combine([e.value for e in node.elements], d)
        if isinstance(node, cst.Dict):
            return self._combine([e.value for e in node.elements if isinstance(e, cst.DictElement)], d)
        return None

    def _torch_qname(self, node: cst.CSTNode) -> str | None:
        """The torch name a plain dotted chain refers to (``F.relu``); None for anything else
        (``torch.nn.Linear(2, 1).cuda`` is a method of a call result, not a torch name)."""
        inner = node
        while isinstance(inner, cst.Attribute):
            inner = inner.value
        if not isinstance(inner, cst.Name):
            return None
        for name in self.rule.qnames(node):
            if name == "torch" or name.startswith("torch."):
                return name
        return None

    def _call_kind(self, node: cst.Call, d: int) -> Kind:
        func = node.func
        qname = self._torch_qname(func)
        if qname is not None:
            kind = _torch_call_kind(qname)
            if kind == "tensor" and qname in TENSOR_FACTORIES:
                no_device = not any(a.keyword is not None and a.keyword.value == "device" for a in node.args)
                if qname in LIKE_FACTORIES:
                    if no_device and node.args and node.args[0].keyword is None:
                        return self.kind(node.args[0].value, d) or "tensor"
                elif no_device:
                    return "host"
            return kind
        if isinstance(func, cst.Attribute):
            method = func.attr.value
            receiver = self.kind(func.value, d)
            if receiver == "tensor":
                return None if method in _NON_TENSOR_METHODS else "tensor"
            if receiver == "host":
                if method in _NON_TENSOR_METHODS:
                    return None
                return "tensor" if method in _MOVES and self._moves_to_device(node) else "host"
            if receiver == "module":
                if method in _MODULE_METHODS:
                    return "module"
                return "tensor" if method in _MODULE_TENSOR_METHODS else None
            return None
        callee = self.kind(func, d)
        if callee == "module":
            return "tensor"
        if callee == "module_class":
            return "module"
        return None

    def _attribute_kind(self, node: cst.Attribute, d: int) -> Kind:
        if self._torch_qname(node) is not None:
            return None  # torch.float32, torch.pi, torch.nn.Linear (the class itself)...
        attr = node.attr.value
        if attr in _NON_TENSOR_ATTRS:
            return None
        if attr == "grad":
            return "tensor"
        receiver = self.kind(node.value, d)
        if receiver in ("tensor", "host") and attr in _TENSOR_ATTRS:
            return receiver
        if receiver == "module":
            return "tensor" if attr in _MODULE_TENSOR_ATTRS else "module"  # model.fc: a submodule
        return None

    # -- names ---------------------------------------------------------------------------
    def _name_kind(self, node: cst.Name, d: int) -> Kind:
        scope = self.rule.get_metadata(ScopeProvider, node, None)
        if scope is None or node.value not in scope:
            return None
        kinds = {self._binding_kind(a, d) for a in scope[node.value] if isinstance(a, Assignment)}
        for k in ("tensor", "module", "module_class", "host"):
            if k in kinds:
                return k
        return None

    def _binding_kind(self, assignment: Assignment, d: int) -> Kind:
        key = id(assignment)
        if key in self._bindings:
            return self._bindings[key]
        self._bindings[key] = None  # breaks cycles such as ``x = x + 1``
        kind = self._compute_binding(assignment, d)
        if kind is None and any(self._is_backward_receiver(ref.node) for ref in assignment.references):
            kind = "tensor"
        self._bindings[key] = kind
        return kind

    def _is_backward_receiver(self, node: cst.CSTNode) -> bool:
        parent = self.rule.parent(node)
        return (isinstance(parent, cst.Attribute) and parent.value is node and parent.attr.value == "backward"
                and isinstance(self.rule.parent(parent), cst.Call))

    def _compute_binding(self, assignment: Assignment, d: int) -> Kind:
        target = assignment.node
        if isinstance(target, cst.ClassDef):
            return "module_class" if any(self._torch_qname(b.value) for b in target.bases) or any(
                self.kind(b.value, d) == "module_class" for b in target.bases) else None
        if isinstance(target, cst.Param):
            return self._annotated_tensor(target.annotation)
        if not isinstance(target, cst.Name):
            return None
        parent = self.rule.parent(target)
        if isinstance(parent, cst.Param):
            return self._annotated_tensor(parent.annotation)
        if isinstance(parent, cst.AugAssign):
            value_kind = self.kind(parent.value, d)
            return value_kind if value_kind in ("tensor", "host") else None
        if isinstance(parent, cst.AnnAssign):
            return self._annotated_tensor(parent.annotation) or (
                self.kind(parent.value, d) if parent.value is not None else None)
        unpacked = False
        while isinstance(parent, (cst.Element, cst.Tuple, cst.List, cst.StarredElement)):
            unpacked = True
            parent = self.rule.parent(parent)
        if isinstance(parent, cst.AssignTarget):
            value_kind = self.kind(self.rule.parent(parent).value, d)  # type: ignore[union-attr]
            if unpacked:
                return value_kind if value_kind in ("tensor", "host") else None
            return value_kind
        if isinstance(parent, cst.For):
            return self._loop_target_kind(parent, target, unpacked, d)
        return None

    def _loop_target_kind(self, loop: cst.For, target: cst.Name, unpacked: bool, d: int) -> Kind:
        it = loop.iter
        if isinstance(it, cst.Call) and isinstance(it.func, cst.Attribute):
            method = it.func.attr.value
            if method == "parameters" and not unpacked:
                return "tensor"
            if method == "named_parameters" and isinstance(loop.target, cst.Tuple) \
                    and len(loop.target.elements) == 2 and loop.target.elements[1].value is target:
                return "tensor"
        if not unpacked:
            rows = self.kind(it, d)
            if rows in ("tensor", "host"):
                return rows  # iterating a tensor yields its rows
        return None

    def _moves_to_device(self, call: cst.Call) -> bool:
        """``.cuda()``, ``.to(device)``, ``.to(device=...)``; not ``.to(torch.float16)``/``.to(dtype=...)``."""
        assert isinstance(call.func, cst.Attribute)
        if call.func.attr.value == "cuda":
            return True
        for arg in call.args:
            if arg.keyword is not None:
                if arg.keyword.value == "device":
                    return True
                continue
            qname = self._torch_qname(arg.value)
            if qname is None or qname.startswith("torch.device"):
                return True  # a device variable, a string, torch.device(...)
        return False

    def _annotated_tensor(self, annotation: cst.Annotation | None) -> Kind:
        if annotation is None:
            return None
        qname = self._torch_qname(annotation.annotation)
        return "tensor" if qname in _TENSOR_CLASSES else None


def _torch_call_kind(qname: str) -> Kind:
    if qname in _TENSOR_CLASSES:
        return "tensor"
    if qname in _MODULE_TORCH_FUNCS:
        return "module"
    last = qname.rsplit(".", 1)[-1]
    if qname.startswith("torch.nn.") and not qname.startswith(_TENSOR_NAMESPACES) and last[:1].isupper():
        return "module"  # torch.nn.Linear(...), torch.nn.CrossEntropyLoss(...)
    if qname.startswith(_TENSOR_NAMESPACES):
        return "tensor"
    if qname.count(".") != 1 or (last[:1].isupper() and not last.endswith("Tensor")):
        return None  # torch.optim/utils/cuda/distributed..., torch.Generator, torch.Size...
    if last.endswith("Tensor"):
        return "tensor"
    if last in _NON_TENSOR_TORCH_FUNCS or last.startswith(("is_", "get_", "set_", "use_", "_")):
        return None
    return "tensor"
