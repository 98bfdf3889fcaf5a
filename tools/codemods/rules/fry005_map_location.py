"""FRY005 (placement.map-location): torch.load(..., map_location="cuda" | lambda storage, loc:
storage.cuda()) -> device."""

from __future__ import annotations

import libcst as cst

from tools.codemods.base import CodemodRule
from tools.codemods.nodes import cuda_device_string, expr, kwarg
from tools.codemods.tables import TORCH_LOAD


def _is_cuda_lambda(node: cst.BaseExpression) -> bool:
    if not isinstance(node, cst.Lambda) or not node.params.params:
        return False
    body = node.body
    first = node.params.params[0].name.value
    return (isinstance(body, cst.Call) and isinstance(body.func, cst.Attribute) and body.func.attr.value == "cuda"
            and isinstance(body.func.value, cst.Name) and body.func.value.value == first and not body.args)


class MapLocation(CodemodRule):
    ID = "FRY005"
    NAME = "placement.map-location"
    DESCRIPTION = ('torch.load(map_location="cuda") or map_location=lambda storage, loc: storage.cuda() -> '
                   'map_location=device.')
    CATEGORY = "auto"
    ENTRIES = (5,)

    def visit_Call(self, node: cst.Call) -> None:
        if self.qname_in(node.func, TORCH_LOAD) is None:
            return
        arg = kwarg(node, "map_location")
        if arg is None:
            return
        is_cuda, ordinal = cuda_device_string(arg.value)
        if (is_cuda and ordinal in (None, 0)) or _is_cuda_lambda(arg.value):
            ref = self.device_ref(arg.value)
            self.hit(arg.value, "checkpoint loaded straight onto CUDA", category="auto", suggestion=ref,
                     needs_device=True, transform=lambda updated: expr(ref))
        elif is_cuda or isinstance(arg.value, (cst.Dict, cst.Lambda)):
            self.hit(arg.value, "map_location names CUDA devices", category="review",
                     suggestion=f"map_location={self.dev}")


RULE = MapLocation
