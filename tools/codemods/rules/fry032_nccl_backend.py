"""FRY032 (dist.nccl-backend): init_process_group("nccl") / backend="nccl" -> the device's default backend.

``"nccl"`` becomes ``torch.distributed.get_default_backend_for_device(device)`` (nccl on CUDA, gloo on the
CPU, the backend a device registers for itself, e.g. tpx's). A backend held in a variable the module binds
to ``"nccl"`` (nanoGPT's ``backend = 'nccl'`` config global, which the command line may override) is
mapped at the call only while it still says nccl: ``(get_default_backend_for_device(device) if backend ==
"nccl" else backend)``.
"""

from __future__ import annotations

import libcst as cst

from tools.codemods.base import CodemodRule
from tools.codemods.nodes import expr, kwarg, positional, string_value
from tools.codemods.tables import INIT_PROCESS_GROUP, NEW_GROUP

_GROUP_CALLS = INIT_PROCESS_GROUP | NEW_GROUP


class _NcclNames(cst.CSTVisitor):
    """Names the module assigns the literal ``"nccl"`` (``backend = 'nccl'``)."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def visit_Assign(self, node: cst.Assign) -> None:
        if string_value(node.value) == "nccl":
            self.names.update(t.target.value for t in node.targets if isinstance(t.target, cst.Name))

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if isinstance(node.target, cst.Name) and string_value(node.value) == "nccl":
            self.names.add(node.target.value)


def nccl_names(module: cst.Module | None) -> frozenset[str]:
    """Names bound to the literal ``"nccl"`` anywhere in ``module``."""
    found = _NcclNames()
    if module is not None:
        module.visit(found)
    return frozenset(found.names)


class NcclBackend(CodemodRule):
    ID = "FRY032"
    NAME = "dist.nccl-backend"
    DESCRIPTION = ('init_process_group("nccl") / backend="nccl" (also new_group) -> '
                   "torch.distributed.get_default_backend_for_device(device): nccl on CUDA, gloo on the CPU, the "
                   "backend the device registers for itself elsewhere; backend=<a name the module binds to "
                   '"nccl"> -> that, while the name still says "nccl".')
    CATEGORY = "auto"
    ENTRIES = (32,)

    def visit_Call(self, node: cst.Call) -> None:
        if self.qname_in(node.func, _GROUP_CALLS) is None:
            return
        is_init = self.qname_in(node.func, INIT_PROCESS_GROUP) is not None
        arg = kwarg(node, "backend")
        pos = positional(node)
        if arg is None and is_init and pos:
            arg = pos[0]
        if arg is None:
            return
        if isinstance(arg.value, cst.Name):
            self._nccl_name(arg.value)
            return
        value = string_value(arg.value)
        if value is None or "nccl" not in value:
            return
        if value != "nccl":
            self.hit(arg.value, "NCCL named in a backend spec Ferry cannot rewrite", category="review",
                     suggestion='"cpu:gloo,<device>:<ccl>" for the target device')
            return
        replacement = self._default_backend(arg.value)
        self.hit(arg.value, "NCCL runs on NVIDIA GPUs only", category="auto", suggestion=replacement,
                 transform=lambda updated: expr(replacement), needs_device=True)

    def _default_backend(self, node: cst.CSTNode) -> str:
        return self.torch_text(f"torch.distributed.get_default_backend_for_device({self.device_ref(node)})")

    def _nccl_name(self, name: cst.Name) -> None:
        if self.ctx.nccl_names is None:
            self.ctx.nccl_names = nccl_names(self.ctx.module)
        if name.value not in self.ctx.nccl_names:
            return
        text = f'({self._default_backend(name)} if {name.value} == "nccl" else {name.value})'
        self.hit(name, f'{name.value} is bound to "nccl", which runs on NVIDIA GPUs only', category="auto",
                 suggestion=text, transform=lambda updated: expr(text), needs_device=True)


RULE = NcclBackend
