"""FRY033 (dist.backend-check): "nccl" in backend checks (assert backend in ("nccl", ...)) -> review."""

from __future__ import annotations

import libcst as cst

from tools.codemods.base import Rule
from tools.codemods.nodes import string_value
from tools.codemods.tables import INIT_PROCESS_GROUP, NEW_GROUP

_GROUP_CALLS = INIT_PROCESS_GROUP | NEW_GROUP


class BackendChecks(Rule):
    ID = "FRY033"
    NAME = "dist.backend-check"
    DESCRIPTION = '"nccl" string literals outside init_process_group/new_group (backend checks, defaults) -> review.'
    CATEGORY = "review"
    ENTRIES = (33,)

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        if string_value(node) != "nccl":
            return
        parent = self.parent(node)
        if isinstance(parent, cst.Arg):
            call = self.parent(parent)
            if isinstance(call, cst.Call) and self.qname_in(call.func, _GROUP_CALLS):
                return
        self.hit(node, '"nccl" hard-codes the NVIDIA collective backend',
                 suggestion="torch.distributed.get_default_backend_for_device(device) or accept any backend")


RULE = BackendChecks
