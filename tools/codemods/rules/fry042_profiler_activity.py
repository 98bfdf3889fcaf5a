"""FRY042 (profile.cuda-activity): ProfilerActivity.CUDA, sort_by="cuda_time_total" -> the current device's
activity / device keys.

Device-generic activity (``--device accelerator``): torch 2.13 names every device's activity after its
type (``ProfilerActivity.CUDA``/``XPU``/``MTIA``/``HPU``, and ``torch.utils.backend_registration`` mirrors
a renamed PrivateUse1 backend as ``ProfilerActivity.TPX``), so ``getattr(ProfilerActivity,
device.type.upper(), ProfilerActivity.CPU)`` is the current device's activity, CPU on CPU or on a device
without one. The profiler raises ``ValueError`` for an activity given twice, so inside a list/tuple/set
that also holds ``ProfilerActivity.CPU`` the element becomes ``*({that} - {ProfilerActivity.CPU})`` (nothing
on CPU). Elsewhere (``acts.append(ProfilerActivity.CUDA)``, comparisons) CPU could end up twice, so those
sites stay review.
"""

from __future__ import annotations

import libcst as cst

from tools.codemods.base import CodemodRule
from tools.codemods.nodes import code, expr, kwarg, string_value
from tools.codemods.tables import PROFILER_CPU_ACTIVITY, PROFILER_CUDA_ACTIVITY, PROFILER_SORT_KEYS

_LITERALS = (cst.List, cst.Tuple, cst.Set)


class ProfilerActivity(CodemodRule):
    ID = "FRY042"
    NAME = "profile.cuda-activity"
    DESCRIPTION = ('sort_by="cuda_time_total" (and other cuda_* keys) -> "device_time_total"; '
                   "ProfilerActivity.CUDA -> ProfilerActivity.PrivateUse1 with --device tpx; device-generic: in an "
                   "activity list/tuple/set -> getattr(ProfilerActivity, device.type.upper(), ProfilerActivity.CPU) "
                   "(starred and minus CPU when the literal also lists CPU: the profiler rejects duplicates); "
                   "review elsewhere.")
    CATEGORY = "auto"
    ENTRIES = (42,)

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if self.qname_in(node, PROFILER_CUDA_ACTIVITY) is None:
            return
        if self.ctx.device_mode == "tpx":
            self.hit(node, "ProfilerActivity.CUDA records nothing on tpx", category="auto",
                     suggestion="ProfilerActivity.PrivateUse1",
                     transform=lambda updated: updated.with_changes(attr=cst.Name("PrivateUse1")))
            return
        element = self.parent(node)
        literal = self.parent(element) if isinstance(element, cst.Element) and element.value is node else None
        if not isinstance(element, cst.Element) or not isinstance(literal, _LITERALS):
            self.hit(node, "ProfilerActivity.CUDA records nothing off CUDA; outside an activity list/tuple/set the "
                           "device's activity cannot be substituted safely (on CPU it is ProfilerActivity.CPU, and "
                           "the profiler raises ValueError for an activity given twice)", category="review",
                     suggestion=self._activity_text(node, "ProfilerActivity") + " where CPU cannot be added twice")
            return
        with_cpu = any(self.qname_in(e.value, PROFILER_CPU_ACTIVITY) for e in literal.elements
                       if isinstance(e, cst.Element))
        device_type = self.device_type(node)
        enum = code(node.value)
        activity = f"getattr({enum}, {device_type}.upper(), {enum}.CPU)"
        text = f"*({{{activity}}} - {{{enum}.CPU}})" if with_cpu else activity
        self.hit(element, "ProfilerActivity.CUDA records nothing off CUDA", category="auto", suggestion=text,
                 needs_device=True,
                 transform=lambda updated: self._element(updated, device_type, with_cpu))

    def _activity_text(self, node: cst.Attribute, enum: str) -> str:
        return f"getattr({enum}, {self.device_type(node)}.upper(), {enum}.CPU)"

    @staticmethod
    def _element(updated: cst.CSTNode, device_type: str, with_cpu: bool) -> cst.CSTNode:
        assert isinstance(updated, cst.Element) and isinstance(updated.value, cst.Attribute)
        enum = code(updated.value.value)
        activity = f"getattr({enum}, {device_type}.upper(), {enum}.CPU)"
        if not with_cpu:
            return updated.with_changes(value=expr(activity))
        starred = expr(f"[*({{{activity}}} - {{{enum}.CPU}})]")
        assert isinstance(starred, cst.List)
        return starred.elements[0].with_changes(comma=updated.comma)

    def visit_Call(self, node: cst.Call) -> None:
        arg = kwarg(node, "sort_by")
        literal = arg.value if arg is not None else None
        value = string_value(literal)
        if not isinstance(literal, cst.SimpleString) or value not in PROFILER_SORT_KEYS:
            return
        new = PROFILER_SORT_KEYS[value]
        # the literal's own prefix (u, r) and quotes; the new key is plain letters and underscores
        text = f"{literal.prefix}{literal.quote}{new}{literal.quote}"
        self.hit(literal, f'sort_by="{value}" is a CUDA-only key', category="auto", suggestion=f'"{new}"',
                 transform=lambda updated: expr(text))


RULE = ProfilerActivity
