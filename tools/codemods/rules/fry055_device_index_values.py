"""FRY055 (placement.int-device-index): integer device indices held in variables -> the accelerator's device
with that index (catalogue 58).

``x.cuda(local_rank)``, ``.cuda(device_ids[0])``, ``torch.zeros(2, device=rank)``, ``torch.load(f,
map_location=rank)``, ``torch.device(local_rank)`` and, after ``device = 0`` or ``local_rank =
int(os.environ["LOCAL_RANK"])``, ``model.to(device)``: an integer there is a CUDA ordinal. Each becomes
``torch.device(device.type, <index>)`` (the module's device variable: the accelerator, or the CPU without
one, where any index is the one CPU device), so the index keeps its meaning on every accelerator and the
CPU path runs as before. The integer itself stays an integer (other code may count with it). Which
expressions are indices: :mod:`tools.codemods.device_indices`; ``.to(local_rank)`` of a name the module
does not bind to an integer stays FRY003's review (``.to`` also takes dtypes and tensors).
``torch.cuda.set_device(local_rank)`` is FRY010.
"""

from __future__ import annotations

import libcst as cst

from tools.codemods.base import CodemodRule
from tools.codemods.device_indices import is_device_index
from tools.codemods.nodes import code, cuda_call_to, expr, kwarg, positional
from tools.codemods.tables import DEVICE_FACTORIES, DEVICE_OBJECT, TORCH_LOAD


class DeviceIndexValues(CodemodRule):
    ID = "FRY055"
    NAME = "placement.int-device-index"
    DESCRIPTION = ("Integer device indices held in variables (catalogue 58): x.cuda(local_rank), "
                   ".cuda(device_ids[0]), device=rank in torch factories and .to(), map_location=rank, "
                   "torch.device(local_rank), and .to(name) where the module binds name only to an integer "
                   "(device = 0, local_rank = int(os.environ['LOCAL_RANK']), a parameter annotated int) -> "
                   "torch.device(device.type, <index>) (the accelerator's device with that index; the CPU "
                   "without one). The variable stays an integer. .to(local_rank) of a name not bound to an "
                   "integer stays FRY003's review; torch.cuda.set_device(local_rank) is FRY010.")
    CATEGORY = "auto"
    ENTRIES = (58,)

    def _indexed(self, node: cst.CSTNode, index: cst.BaseExpression) -> str:
        return f"torch.device({self.device_type(node)}, {code(index)})"

    def _replace(self, value: cst.BaseExpression, message: str) -> None:
        text = self.torch_text(self._indexed(value, value))
        self.hit(value, message, category="auto", suggestion=text, needs_device=True,
                 transform=lambda updated: expr(text))

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value == "cuda":
            self._cuda_method(node, func)
        elif isinstance(func, cst.Attribute) and func.attr.value == "to":
            pos, dev = positional(node), kwarg(node, "device")
            if dev is not None and is_device_index(dev.value, self.ctx, device_only=True):
                self._replace(dev.value, f".to(device={code(dev.value)}): an integer device is a CUDA ordinal")
            elif pos and dev is None and is_device_index(pos[0].value, self.ctx, device_only=False):
                self._replace(pos[0].value, f".to({code(pos[0].value)}): the module binds it to an integer, "
                              "a CUDA ordinal")
        elif self.qname_in(func, DEVICE_OBJECT) is not None:
            if len(node.args) == 1 and node.args[0].keyword is None and not node.args[0].star \
                    and is_device_index(node.args[0].value, self.ctx, device_only=True):
                self._replace_device_object(node)
        elif self.qname_in(func, DEVICE_FACTORIES) is not None:
            dev = kwarg(node, "device")
            if dev is not None and is_device_index(dev.value, self.ctx, device_only=True):
                self._replace(dev.value, f"device={code(dev.value)}: an integer device is a CUDA ordinal")
        elif self.qname_in(func, TORCH_LOAD) is not None:
            loc = kwarg(node, "map_location")
            if loc is not None and is_device_index(loc.value, self.ctx, device_only=True):
                self._replace(loc.value, f"map_location={code(loc.value)}: an integer location is a CUDA ordinal")

    def _replace_device_object(self, node: cst.Call) -> None:
        index = node.args[0].value
        text = self.torch_text(self._indexed(node, index))
        self.hit(node, f"torch.device({code(index)}): an integer is a CUDA ordinal", category="auto",
                 suggestion=text, needs_device=True, transform=lambda updated: expr(text))

    def _cuda_method(self, node: cst.Call, func: cst.Attribute) -> None:
        if any(q.startswith("torch.cuda") or q == "torch" for q in self.qnames(func.value)):
            return
        pos, dev = positional(node), kwarg(node, "device")
        index = pos[0] if pos else dev
        extra = [a for a in node.args if a is not index and not (a.keyword and a.keyword.value == "non_blocking")]
        if index is None or extra or len(pos) > 1 or not is_device_index(index.value, self.ctx, device_only=True):
            return  # FRY002
        target = self.torch_text(self._indexed(node, index.value))

        def transform(updated: cst.CSTNode) -> cst.CSTNode:
            return cuda_call_to(updated, target)

        self.hit(node, f".cuda({code(index.value)}): a CUDA device by index", category="auto",
                 suggestion=f".to({target})", transform=transform, needs_device=True)


RULE = DeviceIndexValues
