"""FRY027 (amp.autocast-state): torch.is_autocast_enabled() without a device, get_autocast_gpu_dtype()
-> device-typed forms; torch.cuda.is_bf16_supported() -> asked of the target device (catalogue 57).

``torch.cuda.is_bf16_supported()`` chooses bfloat16 or float16 in real code (``dtype = torch.bfloat16 if
torch.cuda.is_bf16_supported() else torch.float16``); off CUDA it answers False (or raises), so the code
picks float16 on a device that computes in bf16. The device-generic question is the device module's
``is_bf16_supported`` (tpx's answers True); ``torch.cpu`` has none, and CPU computes bfloat16 (CPU autocast's
default), so the accelerator form is ``(device.type == "cpu" or torch.get_device_module(device).is_bf16_supported())``.
"""

from __future__ import annotations

import libcst as cst

from tools.codemods.generic import CallMapRule
from tools.codemods.nodes import args_code, expr
from tools.codemods.tables import AUTOCAST_STATE_CALLS, BF16_SUPPORTED

_IS_ENABLED = frozenset({"torch.is_autocast_enabled"})


class AutocastState(CallMapRule):
    ID = "FRY027"
    NAME = "amp.autocast-state"
    DESCRIPTION = ("torch.is_autocast_enabled() (no device) -> torch.is_autocast_enabled(device.type); "
                   "torch.get_autocast_gpu_dtype() -> torch.get_autocast_dtype(device.type); "
                   "torch.cuda.is_bf16_supported() -> (device.type == \"cpu\" or "
                   "torch.get_device_module(device).is_bf16_supported()).")
    CATEGORY = "auto"
    ENTRIES = (27, 57)
    CALLS = AUTOCAST_STATE_CALLS

    def visit_Call(self, node: cst.Call) -> None:
        if node.args and self.qname_in(node.func, _IS_ENABLED):
            return  # already names a device type
        if self.qname_in(node.func, BF16_SUPPORTED):
            self._bf16(node)
            return
        super().visit_Call(node)

    def _bf16(self, node: cst.Call) -> None:
        ask = self.torch_text(f"torch.get_device_module({self.device_ref(node)}).is_bf16_supported")
        cpu = "" if self.ctx.device_mode == "tpx" else f'{self.device_type(node)} == "cpu" or '
        wrap = bool(cpu) and not node.lpar

        def transform(updated: cst.CSTNode) -> cst.CSTNode:
            assert isinstance(updated, cst.Call)
            text = f"{cpu}{ask}({args_code(updated.args)})"
            new = expr(f"({text})" if wrap else text)
            return new if wrap else new.with_changes(lpar=updated.lpar, rpar=updated.rpar)

        shown = f"({cpu}{ask}(...))" if wrap else f"{ask}(...)"
        self.hit(node, "torch.cuda.is_bf16_supported() asks CUDA: off CUDA it is False, and float16 is chosen on a "
                       "device that computes in bfloat16", category="auto", suggestion=shown, transform=transform,
                 needs_device=True, add_imports=(("torch", None),))


RULE = AutocastState
