"""FRY060 (attention.sdp-kernel): torch.backends.cuda.sdp_kernel(...) -> torch.nn.attention.sdpa_kernel([...]).

``sdp_kernel`` (deprecated, under ``torch.backends.cuda``) takes four flags; ``sdpa_kernel`` takes the
list of enabled ``SDPBackend`` values, which is what ``sdp_kernel`` itself builds and hands on in torch 2.13.
The rewrite enables the same backends:

* literal flags (keywords or positional) -> the list itself: ``sdpa_kernel([SDPBackend.MATH])``;
* other flag expressions -> the list built from them at run time (each evaluated once):
  ``[backend for backend, enabled in ((SDPBackend.FLASH_ATTENTION, flash), ...) if enabled]``;
* ``sdp_kernel(**flags)`` with a plain name or attribute -> the same list with ``flags.get("enable_flash",
  True)`` and so on as the flags (evaluated outside the comprehension, so no name of the user's is shadowed);
* ``functools.partial(sdp_kernel, <flags>)`` -> ``functools.partial(sdpa_kernel, [...])``, unless the name
  the partial is stored under is also called with arguments somewhere in the module (those calls would
  pass flags that ``sdpa_kernel`` does not take): then review.

Anything else (a bare reference, ``**`` mixed with other arguments, unknown keywords) is review.
"""

from __future__ import annotations

import libcst as cst

from tools.codemods.base import CodemodRule, RuleContext
from tools.codemods.nodes import bool_value, code, expr
from tools.codemods.tables import FUNCTOOLS_PARTIAL, SDP_BACKEND_ORDER, SDP_KERNEL, SDP_KERNEL_FLAGS

_FLAGS = dict(SDP_KERNEL_FLAGS)
_POSITIONAL = tuple(flag for flag, _ in SDP_KERNEL_FLAGS)
_NEW = "torch.nn.attention.sdpa_kernel"
_BACKEND = "torch.nn.attention.SDPBackend"
_SUGGESTION = f"{_NEW}([{_BACKEND}.MATH, ...]) with the backends the flags enable"


class _Unclear(Exception):
    pass


class SdpKernel(CodemodRule):
    ID = "FRY060"
    NAME = "attention.sdp-kernel"
    DESCRIPTION = ("torch.backends.cuda.sdp_kernel(enable_*=...) (also **flags and functools.partial) -> "
                   "torch.nn.attention.sdpa_kernel([SDPBackend...]) with the same enabled backends.")
    CATEGORY = "auto"
    ENTRIES = (56,)

    def __init__(self, ctx: RuleContext) -> None:
        super().__init__(ctx)
        self._handled: set[int] = set()
        self._module: cst.Module | None = None
        self._called: set[str] | None = None

    def visit_Module(self, node: cst.Module) -> None:
        self._module = node

    @property
    def _called_with_args(self) -> set[str]:
        """Names some call passes arguments to, collected on first use (only a partial of sdp_kernel asks)."""
        if self._called is None:
            collector = _CalledWithArgs()
            if self._module is not None:
                self._module.visit(collector)
            self._called = collector.names
        return self._called

    def visit_Call(self, node: cst.Call) -> None:
        if self.qname_in(node.func, SDP_KERNEL) is not None:
            self._handled.add(id(node.func))
            self._rewrite(node, list(node.args), partial=False)
            return
        if node.args and self.qname_in(node.func, FUNCTOOLS_PARTIAL) is not None \
                and node.args[0].keyword is None and node.args[0].star == "" \
                and self.qname_in(node.args[0].value, SDP_KERNEL) is not None:
            self._handled.add(id(node.args[0].value))
            stored = _stored_as(self.parent(node), node)
            if stored is not None and stored in self._called_with_args:
                self.hit(node, f"functools.partial(sdp_kernel, ...) stored as `{stored}`, which is also called with "
                               "arguments here: sdpa_kernel takes a backend list, not sdp_kernel's flags",
                         category="review", suggestion=_SUGGESTION)
                return
            self._rewrite(node, list(node.args[1:]), partial=True)

    def _rewrite(self, site: cst.Call, args: list[cst.Arg], *, partial: bool) -> None:
        try:
            backends = self._backends(args)
        except _Unclear as why:
            self.hit(site, f"torch.backends.cuda.sdp_kernel is deprecated and CUDA-named: {why}", category="review",
                     suggestion=_SUGGESTION)
            return
        new = self.torch_text(_NEW)
        text = backends

        def transform(updated: cst.CSTNode) -> cst.CSTNode:
            assert isinstance(updated, cst.Call)
            if partial:
                first = updated.args[0].with_changes(value=expr(new))
                rest = cst.Arg(expr(text))
                return updated.with_changes(args=[first, rest])
            return updated.with_changes(func=expr(new), args=[cst.Arg(expr(text))])

        shown = f"functools.partial({new}, {text})" if partial else f"{new}({text})"
        self.hit(site, "torch.backends.cuda.sdp_kernel is deprecated: sdpa_kernel takes the enabled backends",
                 category="auto", suggestion=shown, transform=transform, add_imports=(("torch", None),))

    def _backends(self, args: list[cst.Arg]) -> str:
        backend = self.torch_text(_BACKEND)
        if len(args) == 1 and args[0].star == "**":
            source = args[0].value
            if not isinstance(source, (cst.Name, cst.Attribute)):
                raise _Unclear(f"`**{code(source)}` is not a plain name (it would be evaluated once per flag)")
            return self._ordered({flag: expr(f'{code(source)}.get("{flag}", True)') for flag in _POSITIONAL},
                                 backend)
        values: dict[str, cst.BaseExpression] = {}
        for i, arg in enumerate(args):
            if arg.star:
                raise _Unclear(f"`{code(arg).strip(', ')}` is mixed with other arguments")
            if arg.keyword is None:
                if i >= len(_POSITIONAL):
                    raise _Unclear("positional arguments beyond its four flags")
                values[_POSITIONAL[i]] = arg.value
                continue
            if arg.keyword.value not in _FLAGS:
                raise _Unclear(f"unknown argument `{arg.keyword.value}`")
            values[arg.keyword.value] = arg.value
        literal = {flag: bool_value(v) for flag, v in values.items()}
        if all(v is not None for v in literal.values()):
            on = [flag for flag in SDP_BACKEND_ORDER if literal.get(flag, True)]
            return "[" + ", ".join(f"{backend}.{_FLAGS[flag]}" for flag in on) + "]"
        return self._ordered(values, backend)

    @staticmethod
    def _ordered(values: dict[str, cst.BaseExpression], backend: str) -> str:
        """The backend list built at run time from flag expressions (missing flags default to on)."""
        pairs = ", ".join(f"({backend}.{_FLAGS[flag]}, {code(values[flag]) if flag in values else 'True'})"
                          for flag in SDP_BACKEND_ORDER)
        return f"[backend for backend, enabled in ({pairs}) if enabled]"

    def _reference(self, node: cst.CSTNode) -> None:
        if id(node) in self._handled or not self.is_outermost_attribute(node):
            return
        if self.qname_in(node, SDP_KERNEL) is None:
            return
        parent = self.parent(node)
        while isinstance(parent, (cst.Attribute, cst.Name)):
            parent = self.parent(parent)
        if isinstance(parent, (cst.ImportAlias, cst.ImportFrom, cst.Import)):
            return
        self.hit(node, "torch.backends.cuda.sdp_kernel is deprecated; sdpa_kernel takes a backend list",
                 category="review", suggestion=_SUGGESTION)

    def leave_Name(self, original_node: cst.Name) -> None:
        self._reference(original_node)

    def leave_Attribute(self, original_node: cst.Attribute) -> None:
        self._reference(original_node)


class _CalledWithArgs(cst.CSTVisitor):
    """Names (or attribute names) that some call in the module passes arguments to."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def visit_Call(self, node: cst.Call) -> None:
        if node.args:
            if isinstance(node.func, cst.Name):
                self.names.add(node.func.value)
            elif isinstance(node.func, cst.Attribute):
                self.names.add(node.func.attr.value)


def _stored_as(parent: cst.CSTNode | None, value: cst.Call) -> str | None:
    """The name (or attribute name) a partial is assigned to."""
    if isinstance(parent, cst.Assign) and parent.value is value and len(parent.targets) == 1:
        target = parent.targets[0].target
        if isinstance(target, cst.Name):
            return target.value
        if isinstance(target, cst.Attribute):
            return target.attr.value
    return None


RULE = SdpKernel
