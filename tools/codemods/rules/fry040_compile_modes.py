"""FRY040 (compile.cuda-modes): torch.compile(mode="max-autotune"|"reduce-overhead") / backend="inductor" -> review."""

from __future__ import annotations

import libcst as cst

from tools.codemods.base import CodemodRule
from tools.codemods.nodes import kwarg, string_value
from tools.codemods.tables import CUDA_GRAPH_COMPILE_MODES, TORCH_COMPILE


class CompileModes(CodemodRule):
    ID = "FRY040"
    NAME = "compile.cuda-modes"
    DESCRIPTION = ('torch.compile(mode="max-autotune"|"reduce-overhead") (CUDA graphs) and backend="inductor" '
                   "-> review: use the target's compile backend and the default mode.")
    CATEGORY = "review"
    ENTRIES = (40,)

    def visit_Call(self, node: cst.Call) -> None:
        if self.qname_in(node.func, TORCH_COMPILE) is None:
            return
        mode = kwarg(node, "mode")
        if mode is not None and string_value(mode.value) in CUDA_GRAPH_COMPILE_MODES:
            self.hit(mode, f'mode="{string_value(mode.value)}" relies on CUDA graphs/Triton autotuning',
                     suggestion='mode="default"')
        backend = kwarg(node, "backend")
        if backend is not None and string_value(backend.value) == "inductor":
            self.hit(backend, 'backend="inductor" generates Triton code for CUDA devices',
                     suggestion="omit backend, or the target's registered torch.compile backend")


RULE = CompileModes
