"""FRY053 (placement.device-string): predicates on a device held as a string -> device-generic ones.

``device = 'cuda'`` stays a string (FRY001 rewrites it to the accelerator's type name), so the code
that tests it must stop asking for CUDA by name: ``'cuda' in device``, ``device.startswith('cuda')``
and ``device_type == 'cuda'`` mean "not the CPU", and ``'cuda' if 'cuda' in device else 'cpu'`` is the
device's type (catalogue 54: ``device_type`` then keeps autocast on the accelerator and the
nullcontext() on the CPU). A string
choice on a user's condition, ``'cuda' if args.cuda else 'cpu'``, picks the accelerator's type name.
"""

from __future__ import annotations

import libcst as cst

from tools.codemods.base import CodemodRule
from tools.codemods.device_strings import is_device_type_choice, predicate_subject
from tools.codemods.nodes import code, cuda_device_string, string_value


class DeviceString(CodemodRule):
    ID = "FRY053"
    NAME = "placement.device-string"
    DESCRIPTION = ("'cuda' in device / device.startswith('cuda') / device_type == 'cuda' on a device string (a "
                   "name, attribute or string key that says device: device, args.device, g['device_type']; not "
                   "x.device.type, FRY001) -> torch.device(device).type != \"cpu\" ('cuda' not in device, != 'cuda' "
                   "-> == \"cpu\"); device_type = 'cuda' if 'cuda' in device else "
                   "'cpu' -> torch.device(device).type (catalogue 54: autocast stays on the accelerator); "
                   "'cuda' if <condition> else 'cpu' (not an availability test: FRY008) -> the accelerator's type "
                   "name if <condition> else 'cpu'. The device stays a string (catalogue 53).")
    CATEGORY = "auto"
    ENTRIES = (53, 54)

    def _replace(self, node: cst.CSTNode, message: str, text: str) -> None:
        self.replace_expression(node, message, self.torch_text(text))

    def _predicate(self, node: cst.CSTNode, message: str) -> None:
        found = predicate_subject(node)
        if found is None or is_device_type_choice(self.parent(node) or node):
            return  # not a device test, or the test of a 'cuda'/'cpu' choice (visit_IfExp rewrites it whole)
        subject, negated = found
        self._replace(node, message, f'torch.device({code(subject)}).type {"==" if negated else "!="} "cpu"')

    def visit_Comparison(self, node: cst.Comparison) -> None:
        self._predicate(node, "'cuda' in <device string> is false on every other accelerator")

    def visit_Call(self, node: cst.Call) -> None:
        self._predicate(node, "<device string>.startswith('cuda') is false on every other accelerator")

    def visit_IfExp(self, node: cst.IfExp) -> None:
        if is_device_type_choice(node):
            found = predicate_subject(node.test)
            assert found is not None
            self._replace(node, "a device type chosen between 'cuda' and 'cpu' by name",
                          f"torch.device({code(found[0])}).type")
            return
        is_cuda, ordinal = cuda_device_string(node.body)
        if not is_cuda or ordinal not in (None, 0) or string_value(node.orelse) != "cpu":
            return
        if "is_available" in code(node.test):
            return  # FRY008
        self.string_device_hit(node.body, "a CUDA device string chosen on a condition", ordinal)


RULE = DeviceString
