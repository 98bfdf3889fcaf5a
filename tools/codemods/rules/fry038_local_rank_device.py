"""FRY038 (dist.local-rank-device): f"cuda:{local_rank}" / torch.device("cuda", local_rank) -> device.type + index.

``init_process_group(..., device_id=local_rank)`` / ``device_id=torch.device("cuda", local_rank)`` (the GPU a
rank binds its group to) -> ``device_id=(torch.device(device.type, local_rank) if device.type != "cpu" else
None)``: PyTorch takes only an accelerator there ("init_process_group device_id parameter must be an
accelerator with an index"), so the CPU binds none, as a CPU program does. A device string assigned to the
module's device variable (nanoGPT's ``device = f'cuda:{ddp_local_rank}'``) becomes the accelerator's type
name with that index.
"""

from __future__ import annotations

import libcst as cst

from tools.codemods.base import CodemodRule, RuleContext
from tools.codemods.device_indices import is_device_index
from tools.codemods.nodes import code, cuda_device_string, expr, int_value, kwarg, string_value
from tools.codemods.tables import DEVICE_OBJECT, INIT_PROCESS_GROUP
from tools.codemods.targets import device_string_expression


class LocalRankDevice(CodemodRule):
    ID = "FRY038"
    NAME = "dist.local-rank-device"
    DESCRIPTION = ('torch.device("cuda", local_rank) -> torch.device(device.type, local_rank); '
                   'f"cuda:{local_rank}" -> f"{device.type}:{local_rank}"; "cuda:{}".format(r) and "cuda:%d" % r -> '
                   'the accelerator\'s type name + ":{}" formatted the same way; '
                   'init_process_group(device_id=local_rank | torch.device("cuda", i)) -> '
                   'device_id=(torch.device(device.type, i) if device.type != "cpu" else None). '
                   "(torch.cuda.set_device(local_rank) is FRY010.)")
    CATEGORY = "auto"
    ENTRIES = (38,)

    def __init__(self, ctx: RuleContext) -> None:
        super().__init__(ctx)
        self._templates: set[int] = set()  # the formatted templates rewritten (no review finding for them)

    def visit_Call(self, node: cst.Call) -> None:
        if self.qname_in(node.func, INIT_PROCESS_GROUP) is not None:
            self._device_id(node)
            return
        if self.qname_in(node.func, DEVICE_OBJECT) is None or len(node.args) != 2:
            return
        first, second = node.args
        if not (cuda_device_string(first.value)[0] and int_value(second.value) is None):
            return
        dtype = self.device_type(node)
        self.hit(first.value, "device index from the launcher on a CUDA device", category="auto",
                 suggestion=f"torch.device({dtype}, {code(second.value)})",
                 transform=lambda updated: expr(dtype), needs_device=True)

    def _device_id(self, node: cst.Call) -> None:
        arg = kwarg(node, "device_id")
        index = self._cuda_index(arg.value) if arg is not None else None
        if arg is None or index is None:
            return
        dtype = self.device_type(node)
        text = self.torch_text(f'(torch.device({dtype}, {index}) if {dtype} != "cpu" else None)')
        self.hit(arg.value, "device_id names the rank's CUDA device (the CPU takes none)", category="auto",
                 suggestion=text, transform=lambda updated: expr(text), needs_device=True)

    def _cuda_index(self, value: cst.BaseExpression) -> str | None:
        """The index text of a device_id meaning a CUDA device: an integer index, torch.device("cuda", i),
        torch.device("cuda:N") / ("cuda"); None for anything else (a device the program chose)."""
        if int_value(value) is not None or is_device_index(value, self.ctx, device_only=True):
            return code(value)
        if not isinstance(value, cst.Call) or self.qname_in(value.func, DEVICE_OBJECT) is None or not value.args:
            return None
        is_cuda, ordinal = cuda_device_string(value.args[0].value)
        if not is_cuda or any(a.keyword is not None for a in value.args) or len(value.args) > 2:
            return None
        if len(value.args) == 2:
            return code(value.args[1].value)
        return str(ordinal or 0)

    def _string_with_index(self, node: cst.FormattedString) -> None:
        """``f"cuda:{i}"`` where a device string is assigned: the accelerator's type name with index ``i``."""
        quote = node.end
        text = device_string_expression(self.ctx.device_mode)
        if '"' in quote:
            text = text.replace('"', "'")
        if quote in text:
            self.hit(node, "f-string CUDA device", category="review", suggestion=f'f"{{{self.dev}.type}}:{{index}}"')
            return
        new_first = cst.FormattedStringExpression(expression=expr(self.torch_text(text)))

        def transform(updated: cst.CSTNode) -> cst.CSTNode:
            assert isinstance(updated, cst.FormattedString)
            return updated.with_changes(parts=[new_first, cst.FormattedStringText(":"), *updated.parts[1:]])

        self.hit(node, "f-string names a CUDA device by rank", category="auto", transform=transform,
                 suggestion=code(transform(node)), add_imports=(("torch", None),))

    def visit_FormattedString(self, node: cst.FormattedString) -> None:
        parts = node.parts
        if not parts or not isinstance(parts[0], cst.FormattedStringText) or parts[0].value != "cuda:":
            return
        if len(parts) < 2 or not isinstance(parts[1], cst.FormattedStringExpression):
            return
        ref = self.device_ref(node)
        if ref != self.dev:
            self._string_with_index(node)
            return
        new_first = cst.FormattedStringExpression(expression=expr(f"{ref}.type"))

        def transform(updated: cst.CSTNode) -> cst.CSTNode:
            assert isinstance(updated, cst.FormattedString)
            return updated.with_changes(parts=[new_first, cst.FormattedStringText(":"), *updated.parts[1:]])

        self.hit(node, "f-string names a CUDA device by rank", category="auto", transform=transform,
                 suggestion=f'f"{{{ref}.type}}:{{...}}"', needs_device=True)

    def _formatted_template(self, node: cst.BaseExpression) -> None:
        """``"cuda:{}".format(i)`` / ``"cuda:%d" % i`` (Informer's ``torch.device('cuda:{}'.format(args.gpu))``):
        the template becomes the accelerator's type name followed by the rest of it, formatted as before
        ("tpx:0" on tpx, "cpu:0" without an accelerator, "cuda:0" on CUDA). The type is the module-free
        expression, never the device variable: a function assigning ``device = ...`` makes that name local."""
        if not isinstance(node, cst.SimpleString) or node.prefix.lower() not in ("", "u"):
            return
        value = string_value(node)
        if value is None or not value.startswith("cuda:") or not ("%" in value or "{" in value):
            return
        quote = node.quote
        rest = node.value[len(node.prefix) + len(quote) + len("cuda"):]  # ':{}' + closing quote
        text = self.torch_text(f"(({device_string_expression(self.ctx.device_mode)}) + {quote}{rest})")
        self._templates.add(id(node))
        self.hit(node, "formatted CUDA device string", category="auto", suggestion=text,
                 transform=lambda updated: expr(text), add_imports=(("torch", None),))

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if node.attr.value == "format":
            self._formatted_template(node.value)

    def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
        if isinstance(node.operator, cst.Modulo):
            self._formatted_template(node.left)

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        if id(node) in self._templates:
            return
        value = string_value(node)
        if value is not None and value.startswith("cuda:") and ("%" in value or "{" in value):
            self.hit(node, "formatted CUDA device string", category="review",
                     suggestion=f"torch.device({self.dev}.type, index)")


RULE = LocalRankDevice
