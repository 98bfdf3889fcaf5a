"""FRY039 (data.pin-memory): pinned host memory, which only a device with a pinned-memory allocator has.

* ``DataLoader(pin_memory=True)`` (also ``DataLoader`` imported under another name, and classes of the module
  that derive from it) -> review: harmless where no accelerator exists (the loader warns and does not pin),
  so the flag is kept as written.
* ``x.pin_memory()`` raises on a machine without an accelerator ("Cannot access accelerator device when none
  is available"), and a factory's ``pin_memory=True`` raises too ("pin_memory=True requires a CUDA or other
  accelerator backend"): both become conditional on the accelerator,
  ``(x.pin_memory() if torch.accelerator.is_available() else x)`` (one branch is evaluated, so ``x`` is
  evaluated once as before) and ``pin_memory=torch.accelerator.is_available()``.
* ``non_blocking=True`` is harmless everywhere (a synchronous copy where there is nothing to overlap): not reported.
"""

from __future__ import annotations

import libcst as cst

from tools.codemods.base import CodemodRule, RuleContext
from tools.codemods.nodes import bool_value, code, expr, kwarg
from tools.codemods.tables import DATALOADER, DEVICE_FACTORIES

_AVAILABLE = "torch.accelerator.is_available()"


class PinMemory(CodemodRule):
    ID = "FRY039"
    NAME = "data.pin-memory"
    DESCRIPTION = ("DataLoader(pin_memory=True) (also aliases and subclasses) -> review: pinned memory targets CUDA "
                   "(harmless without an accelerator); x.pin_memory() and factories' pin_memory=True, which raise "
                   "without an accelerator -> conditional on torch.accelerator.is_available().")
    CATEGORY = "review"
    ENTRIES = (39,)

    def __init__(self, ctx: RuleContext) -> None:
        super().__init__(ctx)
        self._module: cst.Module | None = None
        self._loader_names: set[str] | None = None

    def visit_Module(self, node: cst.Module) -> None:
        self._module = node

    @property
    def _loaders(self) -> set[str]:
        """Classes of the module deriving (directly or through each other) from DataLoader; found on the
        first call by a plain name (most modules never make one to a class, so they skip the walk)."""
        if self._loader_names is None:
            self._loader_names = set()
            if self._module is not None:
                self._collect(self._module)
        return self._loader_names

    def _collect(self, node: cst.Module) -> None:
        assert self._loader_names is not None
        collector = _ClassDefs()
        node.visit(collector)
        changed = True
        while changed:
            changed = False
            for cls in collector.classes:
                if cls.name.value in self._loader_names:
                    continue
                for base in cls.bases:
                    if base.keyword is None and (self.qname_in(base.value, DATALOADER) is not None or (
                            isinstance(base.value, cst.Name) and base.value.value in self._loader_names)):
                        self._loader_names.add(cls.name.value)
                        changed = True
                        break

    def visit_Call(self, node: cst.Call) -> None:
        if self._is_loader(node.func):
            arg = kwarg(node, "pin_memory")
            if arg is not None and bool_value(arg.value) is not False:
                self.hit(arg, "pin_memory pins host memory for CUDA copies (harmless without an accelerator: the "
                              "loader warns and does not pin)",
                         suggestion=f"pin_memory={self.dev}.type == \"cuda\" (tpx computes in host memory)")
            return
        if self.qname_in(node.func, DEVICE_FACTORIES) is not None:
            self._factory(node)
            return
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value == "pin_memory" and not node.args:
            self._method(node)

    def _is_loader(self, func: cst.BaseExpression) -> bool:
        if self.qname_in(func, DATALOADER) is not None:
            return True
        return isinstance(func, cst.Name) and func.value in self._loaders

    def _factory(self, node: cst.Call) -> None:
        arg = kwarg(node, "pin_memory")
        if arg is None or bool_value(arg.value) is not True:
            return
        available = self.torch_text(_AVAILABLE)
        self.hit(arg.value, "pin_memory=True raises without an accelerator (no pinned-memory allocator)",
                 category="auto", suggestion=f"pin_memory={available}",
                 transform=lambda updated: expr(available), add_imports=(("torch", None),))

    def _method(self, node: cst.Call) -> None:
        available = self.torch_text(_AVAILABLE)
        guard = self.parent(node)
        if isinstance(guard, cst.IfExp) and guard.body is node and code(guard.test) == available:
            return  # already conditional on the accelerator
        # a whole value stands bare; anywhere else (an operand, a receiver, an argument) the conditional is
        # parenthesised
        paren = not isinstance(self.parent(node), (cst.Assign, cst.AnnAssign, cst.Return))

        def transform(updated: cst.CSTNode) -> cst.CSTNode:
            assert isinstance(updated, cst.Call) and isinstance(updated.func, cst.Attribute)
            call = updated.with_changes(lpar=(), rpar=())
            text = f"{code(call)} if {available} else {code(updated.func.value)}"
            return expr(f"({text})" if paren or updated.lpar else text)

        self.hit(node, "x.pin_memory() raises without an accelerator (\"Cannot access accelerator device when "
                       "none is available\")", category="auto",
                 suggestion=f"(x.pin_memory() if {available} else x)", transform=transform,
                 add_imports=(("torch", None),))


class _ClassDefs(cst.CSTVisitor):
    def __init__(self) -> None:
        self.classes: list[cst.ClassDef] = []

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.classes.append(node)


RULE = PinMemory
