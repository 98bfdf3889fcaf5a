"""FRY001 (placement.device-literal): torch.device("cuda") and "cuda" passed to .to() -> the device variable;
"cuda"/"cuda:0" held as a string (assigned, a parameter or option default) -> the accelerator's type string."""

from __future__ import annotations

import libcst as cst

from tools.codemods.base import CodemodRule
from tools.codemods.cli_device import inside_helper
from tools.codemods.device_strings import argument_literal, is_device_string_predicate_part, is_type_comparison_part
from tools.codemods.nodes import code, cuda_device_string, expr, int_value, positional
from tools.codemods.tables import DEVICE_OBJECT, DEVICE_TYPE_CALLS, INIT_PROCESS_GROUP, SET_DEFAULT_DEVICE

#: calls whose "cuda" argument other rules handle
_OTHER_RULES_CALLS = DEVICE_OBJECT | DEVICE_TYPE_CALLS | SET_DEFAULT_DEVICE | INIT_PROCESS_GROUP


class DeviceLiterals(CodemodRule):
    ID = "FRY001"
    NAME = "placement.device-literal"
    DESCRIPTION = ('torch.device("cuda") and "cuda"/"cuda:0" passed to .to() -> the module\'s device variable; '
                   '"cuda"/"cuda:0" assigned to a variable, a parameter default or an option\'s default= stays a '
                   'string (catalogue 53): the accelerator\'s type name, `torch.accelerator.current_accelerator().type '
                   'if torch.accelerator.is_available() else "cpu"` (its index kept: + ":0"); other CUDA device '
                   "strings (comparisons, non-zero ordinals) -> review.")
    CATEGORY = "auto"
    ENTRIES = (1, 53)

    def _replace_with_device(self, node: cst.CSTNode, message: str) -> None:
        ref = self.device_ref(node)
        self.hit(node, message, category="auto", suggestion=ref, needs_device=True,
                 transform=lambda updated: expr(ref).with_changes(
                     lpar=getattr(updated, "lpar", ()), rpar=getattr(updated, "rpar", ())))

    def visit_Call(self, node: cst.Call) -> None:
        if self.qname_in(node.func, DEVICE_OBJECT) is None or not node.args:
            return
        args = node.args
        is_cuda, ordinal = cuda_device_string(args[0].value)
        if not is_cuda or (args[0].keyword is not None and args[0].keyword.value != "type"):
            return
        if len(args) == 2:
            index = int_value(args[1].value)
            if index is None:
                return  # torch.device("cuda", local_rank): FRY038
            ordinal = index if ordinal is None else ordinal
        if len(args) > 2:
            return
        if ordinal not in (None, 0):
            self.hit(node, f"torch.device on CUDA ordinal {ordinal}: the target may have one device",
                     category="review", suggestion=f"torch.device({self.dev}.type, {ordinal})")
            return
        self._replace_with_device(node, "hard-coded CUDA device object")

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        is_cuda, ordinal = cuda_device_string(node)
        if not is_cuda or inside_helper(node, self.parent):
            return  # not CUDA, or the "cuda" that Ferry's own --device helper compares with (FRY054)
        parent = self.parent(node)
        if isinstance(parent, cst.IfExp) or is_device_string_predicate_part(node, parent, self.parent):
            return  # FRY008 / FRY053
        if "FRY062" in self.ctx.running_rules and is_type_comparison_part(node, parent, self.parent):
            return  # <x>.type == "cuda": FRY062
        if isinstance(parent, cst.Arg):
            call = self.parent(parent)
            if not isinstance(call, cst.Call):
                return
            if parent.keyword is not None and parent.keyword.value in ("device", "map_location", "device_type"):
                return  # FRY004 / FRY005 / device-type rules
            if (parent.keyword is not None and parent.keyword.value == "dest"
                    and isinstance(call.func, cst.Attribute) and call.func.attr.value == "add_argument"):
                return  # add_argument(..., dest="cuda"): the name of an option (FRY054), not a device
            if self.qname_in(call.func, _OTHER_RULES_CALLS) is not None:
                return
            if parent.keyword is not None and parent.keyword.value == "default" and ordinal in (None, 0):
                self.string_device_hit(node, "an option's default CUDA device string", ordinal)
                return
            pos = positional(call)
            if (isinstance(call.func, cst.Attribute) and call.func.attr.value == "to" and pos
                    and pos[0] is parent and ordinal in (None, 0)):
                self._replace_with_device(node, '.to("cuda"): hard-coded CUDA device')
                return
        if self._asks_the_accelerator(node, parent, ordinal):
            return
        if isinstance(parent, (cst.Assign, cst.AnnAssign, cst.Param)) and ordinal in (None, 0):
            # a string stays a string: code goes on to test it ('cuda' in device), parse it or override it
            self.string_device_hit(node, "hard-coded CUDA device string", ordinal)
            return
        if "FRY061" in self.ctx.running_rules and argument_literal(node, parent, self.parent):
            return  # an argument or a list of devices: FRY061
        self.hit(node, "CUDA device string in a context Ferry cannot rewrite safely", category="review",
                 suggestion=f"use {self.dev} (a torch.device) or {self.dev}.type (its type string)")

    def _asks_the_accelerator(self, node: cst.SimpleString, parent: cst.CSTNode | None, ordinal: int | None) -> bool:
        """``device.type == "cuda"`` (``!=``) where ``device`` is already the accelerator (Ferry's definition):
        the question whether the accelerator is CUDA, as FRY012/FRY021 write it around CUDA-only features."""
        if not self.ctx.device_is_accelerator or ordinal is not None or not isinstance(parent, cst.ComparisonTarget):
            return False
        comparison = self.parent(parent)
        if not (isinstance(comparison, cst.Comparison) and len(comparison.comparisons) == 1
                and isinstance(parent.operator, (cst.Equal, cst.NotEqual)) and parent.comparator is node):
            return False
        asked = code(comparison.left)
        return asked in (f"{self.dev}.type", self.torch_text(f"torch.device({self.dev}).type"))


RULE = DeviceLiterals
