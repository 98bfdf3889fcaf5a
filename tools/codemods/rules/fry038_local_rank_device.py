"""FRY038 (dist.local-rank-device): f"cuda:{local_rank}" / torch.device("cuda", local_rank) -> device.type + index."""

from __future__ import annotations

import libcst as cst

from tools.codemods.base import Rule
from tools.codemods.nodes import code, cuda_device_string, expr, int_value, string_value
from tools.codemods.tables import DEVICE_OBJECT


class LocalRankDevice(Rule):
    ID = "FRY038"
    NAME = "dist.local-rank-device"
    DESCRIPTION = ('torch.device("cuda", local_rank) -> torch.device(device.type, local_rank); '
                   'f"cuda:{local_rank}" -> f"{device.type}:{local_rank}"; "cuda:%d" % r and '
                   '"cuda:{}".format(r) -> review. (torch.cuda.set_device(local_rank) is FRY010.)')
    CATEGORY = "auto"
    ENTRIES = (38,)

    def visit_Call(self, node: cst.Call) -> None:
        if self.qname_in(node.func, DEVICE_OBJECT) is None or len(node.args) != 2:
            return
        first, second = node.args
        if not (cuda_device_string(first.value)[0] and int_value(second.value) is None):
            return
        dtype = self.device_type(node)
        self.hit(first.value, "device index from the launcher on a CUDA device", category="auto",
                 suggestion=f"torch.device({dtype}, {code(second.value)})",
                 transform=lambda updated: expr(dtype), needs_device=True)

    def visit_FormattedString(self, node: cst.FormattedString) -> None:
        parts = node.parts
        if not parts or not isinstance(parts[0], cst.FormattedStringText) or parts[0].value != "cuda:":
            return
        if len(parts) < 2 or not isinstance(parts[1], cst.FormattedStringExpression):
            return
        ref = self.device_ref(node)
        if ref != self.dev:
            self.hit(node, "f-string CUDA device", category="review", suggestion=f'f"{{{self.dev}.type}}:{{index}}"')
            return
        new_first = cst.FormattedStringExpression(expression=expr(f"{ref}.type"))

        def transform(updated: cst.CSTNode) -> cst.CSTNode:
            assert isinstance(updated, cst.FormattedString)
            return updated.with_changes(parts=[new_first, cst.FormattedStringText(":"), *updated.parts[1:]])

        self.hit(node, "f-string names a CUDA device by rank", category="auto", transform=transform,
                 suggestion=f'f"{{{ref}.type}}:{{...}}"', needs_device=True)

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        value = string_value(node)
        if value is not None and value.startswith("cuda:") and ("%" in value or "{" in value):
            self.hit(node, "formatted CUDA device string", category="review",
                     suggestion=f"torch.device({self.dev}.type, index)")


RULE = LocalRankDevice
