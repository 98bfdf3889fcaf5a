"""FRY050 (perf.host-sync): .item()/.cpu()/.numpy()/.tolist() and tensors formatted as text (print,
logging, f-strings, str.format, %) inside training loops -> reported (profiler territory)."""

from __future__ import annotations

import libcst as cst
from libcst.metadata import Assignment, ScopeProvider

from tools.codemods.base import CodemodRule, RuleContext
from tools.codemods.loops import LoopTracker, enclosing_loop
from tools.codemods.nodes import code
from tools.codemods.tables import LOG_METHODS, SYNC_METHODS, TEXT_BUILTINS
from tools.codemods.tensor_kinds import TensorKinds

_SUGGESTION = "accumulate on the device and read the value every N steps"
_TEXT_SUGGESTION = ("format it every N steps or after the loop (accumulate with .detach() on the device); "
                    "converting a tensor to text copies it to the host")


class HostSyncs(CodemodRule):
    ID = "FRY050"
    NAME = "perf.host-sync"
    DESCRIPTION = (".item(), .cpu(), .numpy(), .tolist() inside a training loop (one that calls backward/step), "
                   "and tensors turned into text there (print(tensor), logging calls, f-strings, str.format, %): "
                   "each forces a device-to-host sync. Reported only; codemods do not change it.")
    CATEGORY = "review"
    ENTRIES = (50,)
    CONTEXTUAL = True
    METADATA_DEPENDENCIES = (ScopeProvider,)

    def __init__(self, ctx: RuleContext) -> None:
        super().__init__(ctx)
        self._loops = LoopTracker()
        self._kinds = TensorKinds(self)

    def _in_training_loop(self, node: cst.CSTNode) -> bool:
        loop = enclosing_loop(node, self.parent)
        return loop is not None and self._loops.is_training_loop(loop)

    def _report_text(self, value: cst.CSTNode, how: str) -> None:
        if self._kinds.is_tensor(value):
            snippet = code(value)
            snippet = snippet if len(snippet) <= 40 else snippet[:37] + "..."
            self.hit(value, f"{how} formats the tensor `{snippet}` in the training loop: a device-to-host "
                            "sync every step", suggestion=_TEXT_SUGGESTION)

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value in SYNC_METHODS and not node.args:
            if self._in_training_loop(node):
                self.hit(node, f".{func.attr.value}() in the training loop syncs the device every step",
                         suggestion=_SUGGESTION)
            return
        sink = self._text_sink(node)
        if sink is None or not self._in_training_loop(node):
            return
        for arg in node.args:
            if arg.keyword is None or sink == "format call":
                self._report_text(arg.value, f"{sink}()" if sink != "format call" else "str.format")

    def _text_sink(self, node: cst.Call) -> str | None:
        func = node.func
        if isinstance(func, cst.Name) and func.value in TEXT_BUILTINS:
            return func.value if f"builtins.{func.value}" in self.qnames(func) else None
        if not isinstance(func, cst.Attribute):
            return None
        method = func.attr.value
        if method == "format" and isinstance(func.value, (cst.SimpleString, cst.ConcatenatedString)):
            return "format call"
        if method in LOG_METHODS and self._is_logger(func.value):
            return f"logging .{method}"
        return None

    def _is_logger(self, node: cst.BaseExpression) -> bool:
        if any(q == "logging" for q in self.qnames(node)):
            return True  # logging.info(...)
        if not isinstance(node, cst.Name):
            return False
        scope = self.get_metadata(ScopeProvider, node, None)
        if scope is None or node.value not in scope:
            return False
        for assignment in scope[node.value]:
            if not isinstance(assignment, Assignment):
                continue  # a builtin: no node of its own, not a getLogger(...) result
            parent = self.parent(assignment.node) if isinstance(assignment.node, cst.Name) else None
            assign = self.parent(parent) if isinstance(parent, cst.AssignTarget) else None
            value = getattr(assign, "value", None)
            if isinstance(value, cst.Call) and "logging.getLogger" in self.qnames(value.func):
                return True
        return False

    def visit_FormattedStringExpression(self, node: cst.FormattedStringExpression) -> None:
        if self._in_training_loop(node):
            self._report_text(node.expression, "an f-string")

    def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
        if not (isinstance(node.operator, cst.Modulo)
                and isinstance(node.left, (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString))):
            return
        if not self._in_training_loop(node):
            return
        values = [e.value for e in node.right.elements] if isinstance(node.right, cst.Tuple) else [node.right]
        for value in values:
            self._report_text(value, "%-formatting")


RULE = HostSyncs
