"""Guards keyed on CUDA (``if x.is_cuda:``, ``if device.type == "cuda":``) and what they protect.

A guard may only be opened to the target accelerator when what it guards runs there after the
migration. Two questions, both syntactic and per module:

- :func:`cuda_only_names`: module-level names bound to CUDA-only code: imports from CUDA-only packages
  (flash_attn, apex, xformers, triton, bitsandbytes, cupy, pycuda, numba.cuda), the result of a C++/CUDA
  extension build (``torch.utils.cpp_extension.load(...)``), functions decorated with a Triton decorator
  and classes or functions whose body uses one of those names. A guard whose test or body names one of
  them protects a CUDA-only kernel and stays CUDA-only (``if _ext is not None and x.is_cuda:``,
  ``if HAS_FLASH_ATTN and q.is_cuda:``).
- :func:`guard_of`: the ``if`` (statement or expression) whose test holds a node, and the part it guards.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import libcst as cst

from tools.codemods.nodes import dotted

Parents = Callable[[cst.CSTNode], cst.CSTNode | None]

#: top-level packages whose kernels run on NVIDIA GPUs only (catalogue entries 45-48)
CUDA_ONLY_PACKAGES = frozenset({"flash_attn", "apex", "xformers", "triton", "bitsandbytes", "cupy", "pycuda"})
#: dotted modules below an otherwise portable package that are CUDA-only
CUDA_ONLY_MODULES = frozenset({"numba.cuda"})
#: the last component of a C++/CUDA extension loader (``load``, ``cpp_extension.load_inline``)
_EXTENSION_LOADERS = frozenset({"load", "load_inline"})

#: expressions a guard test is built of, up to the guard itself
_TEST_PARTS = (cst.BooleanOperation, cst.UnaryOperation, cst.Comparison, cst.ComparisonTarget)


def _cuda_only_module(name: str) -> bool:
    root = name.split(".", 1)[0]
    return root in CUDA_ONLY_PACKAGES or any(name == m or name.startswith(m + ".") for m in CUDA_ONLY_MODULES)


def _imported_names(stmt: cst.CSTNode) -> set[str]:
    """Names a CUDA-only import binds (``from flash_attn import f`` -> f, ``import triton.language as tl`` -> tl)."""
    found: set[str] = set()
    if isinstance(stmt, cst.ImportFrom) and stmt.module is not None and not stmt.relative:
        module = dotted(stmt.module) or ""
        if _cuda_only_module(module) and not isinstance(stmt.names, cst.ImportStar):
            for alias in stmt.names:
                bound = alias.asname.name if alias.asname is not None else alias.name
                if isinstance(bound, cst.Name):
                    found.add(bound.value)
        elif not isinstance(stmt.names, cst.ImportStar):
            # from numba import cuda
            for alias in stmt.names:
                full = f"{module}.{dotted(alias.name) or ''}"
                bound = alias.asname.name if alias.asname is not None else alias.name
                if _cuda_only_module(full) and isinstance(bound, cst.Name):
                    found.add(bound.value)
    elif isinstance(stmt, cst.Import):
        for alias in stmt.names:
            name = dotted(alias.name) or ""
            if not _cuda_only_module(name):
                continue
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                found.add(alias.asname.name.value)
            else:
                found.add(name.split(".", 1)[0])
    return found


def _is_extension_build(value: cst.BaseExpression) -> bool:
    if not isinstance(value, cst.Call):
        return False
    name = dotted(value.func) or ""
    return name.rsplit(".", 1)[-1] in _EXTENSION_LOADERS and (name in _EXTENSION_LOADERS or "cpp_extension" in name)


def _names_used(node: cst.CSTNode) -> set[str]:
    class _Names(cst.CSTVisitor):
        def __init__(self) -> None:
            self.names: set[str] = set()

        def visit_Name(self, name: cst.Name) -> None:
            self.names.add(name.value)

        def visit_Attribute(self, attr: cst.Attribute) -> bool:
            attr.value.visit(self)  # the attribute's own name is not a variable
            return False

    visitor = _Names()
    node.visit(visitor)
    return visitor.names


class _Bindings(cst.CSTVisitor):
    """CUDA-only imports anywhere in the module (they sit in ``try:`` blocks) and extension builds."""

    def __init__(self) -> None:
        self.names: set[str] = set()
        self.defs: list[cst.FunctionDef | cst.ClassDef] = []

    def visit_Import(self, node: cst.Import) -> None:
        self.names |= _imported_names(node)

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        self.names |= _imported_names(node)

    def visit_Assign(self, node: cst.Assign) -> None:
        if _is_extension_build(node.value):
            for target in node.targets:
                if isinstance(target.target, cst.Name):
                    self.names.add(target.target.value)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.defs.append(node)

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.defs.append(node)


def cuda_only_names(module: cst.Module) -> frozenset[str]:
    """Names bound to CUDA-only code in ``module`` (see the module docstring)."""
    bindings = _Bindings()
    module.visit(bindings)
    names = set(bindings.names)
    for definition in bindings.defs:  # a Triton kernel
        for decorator in definition.decorators:
            target = decorator.decorator.func if isinstance(decorator.decorator, cst.Call) else decorator.decorator
            if (dotted(target) or "").split(".", 1)[0] in names | {"triton"}:
                names.add(definition.name.value)
    # a function or class built on those names (an autograd.Function calling the extension) is CUDA-only too
    changed = bool(names)
    while changed:
        changed = False
        for definition in bindings.defs:
            if definition.name.value not in names and _names_used(definition.body) & names:
                names.add(definition.name.value)
                changed = True
    return frozenset(names)


def guard_of(node: cst.CSTNode, parent_of: Parents) -> tuple[cst.CSTNode, cst.CSTNode] | None:
    """(the ``if`` statement or ``if`` expression whose test holds ``node``, the part it guards: the
    statement's body, the expression's value) or None where ``node`` is not part of a guard's test."""
    child = node
    parent = parent_of(child)
    while isinstance(parent, _TEST_PARTS):
        child, parent = parent, parent_of(parent)
    if isinstance(parent, (cst.If, cst.While)) and parent.test is child:
        return parent, parent.body
    if isinstance(parent, cst.IfExp) and parent.test is child:
        return parent, parent.body
    return None


def guards_cuda_only_code(guard: cst.CSTNode, body: cst.CSTNode, names: Iterable[str]) -> bool:
    """Whether ``guard`` (its test or the part it guards) names CUDA-only code."""
    wanted = set(names)
    if not wanted:
        return False
    test = guard.test if isinstance(guard, (cst.If, cst.While, cst.IfExp)) else guard
    return bool((_names_used(test) | _names_used(body)) & wanted)


def in_test_code(node: cst.CSTNode, parent_of: Parents) -> bool:
    """Whether ``node`` sits in an ``assert`` or in a test function (``def test_*``, a method of a
    ``Test*`` class): code that checks where things ran rather than choosing it."""
    current: cst.CSTNode | None = node
    while current is not None:
        if isinstance(current, cst.Assert):
            return True
        if isinstance(current, cst.FunctionDef) and current.name.value.startswith("test"):
            return True
        if isinstance(current, cst.ClassDef) and current.name.value.startswith("Test"):
            return True
        current = parent_of(current)
    return False


def builds_extension(body: cst.CSTNode) -> bool:
    """Whether ``body`` builds a C++/CUDA extension (``_ext = load(name=..., sources=[...])``): what an
    availability guard around it keeps off every other accelerator (the build needs nvcc and a GPU)."""

    class _Builds(cst.CSTVisitor):
        found = False

        def visit_Call(self, node: cst.Call) -> None:
            if _is_extension_build(node):
                self.found = True

    visitor = _Builds()
    body.visit(visitor)
    return visitor.found
