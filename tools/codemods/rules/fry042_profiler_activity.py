"""FRY042 (profile.cuda-activity): ProfilerActivity.CUDA, sort_by="cuda_time_total" -> PrivateUse1 / device keys."""

from __future__ import annotations

import libcst as cst

from tools.codemods.base import Rule
from tools.codemods.nodes import expr, kwarg, string_value
from tools.codemods.tables import PROFILER_CUDA_ACTIVITY, PROFILER_SORT_KEYS


class ProfilerActivity(Rule):
    ID = "FRY042"
    NAME = "profile.cuda-activity"
    DESCRIPTION = ('sort_by="cuda_time_total" (and other cuda_* keys) -> "device_time_total"; '
                   "ProfilerActivity.CUDA -> ProfilerActivity.PrivateUse1 with --device tpx, review otherwise.")
    CATEGORY = "auto"
    ENTRIES = (42,)

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if self.qname_in(node, PROFILER_CUDA_ACTIVITY) is None:
            return
        if self.ctx.device_mode == "tpx":
            self.hit(node, "ProfilerActivity.CUDA records nothing on tpx", category="auto",
                     suggestion="ProfilerActivity.PrivateUse1",
                     transform=lambda updated: updated.with_changes(attr=cst.Name("PrivateUse1")))  # type: ignore[attr-defined]
        else:
            self.hit(node, "ProfilerActivity.CUDA records nothing off CUDA", category="review",
                     suggestion="torch.profiler.supported_activities() (includes PrivateUse1 when present)")

    def visit_Call(self, node: cst.Call) -> None:
        arg = kwarg(node, "sort_by")
        value = string_value(arg.value) if arg is not None else None
        if arg is None or value not in PROFILER_SORT_KEYS:
            return
        new = PROFILER_SORT_KEYS[value]
        quote = arg.value.value[0]  # type: ignore[attr-defined]
        self.hit(arg.value, f'sort_by="{value}" is a CUDA-only key', category="auto", suggestion=f'"{new}"',
                 transform=lambda updated: expr(f"{quote}{new}{quote}"))


RULE = ProfilerActivity
