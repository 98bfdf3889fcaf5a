"""FRY033 (dist.backend-check): "nccl" in backend checks (assert backend in ("nccl", ...)) -> review."""

from __future__ import annotations

import libcst as cst

from tools.codemods.base import CodemodRule
from tools.codemods.nodes import string_value
from tools.codemods.tables import INIT_PROCESS_GROUP, NEW_GROUP

_GROUP_CALLS = INIT_PROCESS_GROUP | NEW_GROUP


class BackendChecks(CodemodRule):
    ID = "FRY033"
    NAME = "dist.backend-check"
    DESCRIPTION = '"nccl" string literals outside init_process_group/new_group (backend checks, defaults) -> review.'
    CATEGORY = "review"
    ENTRIES = (33,)

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        if string_value(node) != "nccl":
            return
        # inside a group call's argument: the backend itself (FRY032), or FRY032's own
        # ``(get_default_backend_for_device(device) if backend == "nccl" else backend)``
        child: cst.CSTNode = node
        parent = self.parent(node)
        while parent is not None and not isinstance(parent, cst.BaseStatement):
            if isinstance(child, cst.Arg) and isinstance(parent, cst.Call) \
                    and self.qname_in(parent.func, _GROUP_CALLS):
                return
            child, parent = parent, self.parent(parent)
        self.hit(node, '"nccl" hard-codes the NVIDIA collective backend',
                 suggestion="torch.distributed.get_default_backend_for_device(device) or accept any backend")


RULE = BackendChecks
