"""FRY012 (runtime.device-properties): get_device_name/get_device_properties/get_device_capability ->
torch.get_device_module(device).*; comparisons of the capability with a CUDA one (capability branches)
are kept for CUDA only.

A capability branch (``major >= 8``, ``get_device_capability(0) >= (8, 0)``) guards a feature of newer
GPUs; on a device that is not CUDA the rewritten test takes the branch of current GPUs, or, where the
branch picks ``torch.bfloat16``, asks the device whether it supports bf16 (``tools/codemods/capability.py``):

    major, _ = torch.cuda.get_device_capability()
    if major >= 8 and torch.cuda.is_bf16_supported():  ->  if (device.type != "cuda" or major >= 8) and ...
    if torch.cuda.get_device_capability()[0] >= 8: dtype = torch.bfloat16
        ->  if (... >= 8 if device.type == "cuda" else (device.type == "cpu" or
                torch.get_device_module(device).is_bf16_supported())): ...

On CUDA every test means what it meant. A capability compared with ``==``/``!=``, in a chained comparison
or with a value that is not a constant stays for review, call and all (what such a test singles out is not
a "newer than" question).
"""

from __future__ import annotations

import libcst as cst
from libcst.metadata import ScopeProvider

from tools.codemods.base import LOOSE_PARENTS, RuleContext
from tools.codemods.capability import CapabilityTest, comparison_test, guarded_text, mentions, unpacked_names
from tools.codemods.generic import CallMapRule
from tools.codemods.nodes import code, expr
from tools.codemods.tables import CAPABILITY_CALLS, DEVICE_PROPERTY_CALLS

_REVIEW = ("the CUDA compute capability is compared in a way that is not a 'newer than' test (==, !=, chained, or "
           "with a value that is not a constant): decide what it singles out and ask the device for that feature")
CAPABILITY = "torch.cuda.get_device_capability"


class DeviceProperties(CallMapRule):
    ID = "FRY012"
    NAME = "runtime.device-properties"
    DESCRIPTION = ("get_device_name/get_device_properties/get_device_capability -> torch.get_device_module(device).*; "
                   "a capability branch (the capability, its major or a name unpacked from it compared with a "
                   "constant: `major >= 8`, `>= (8, 0)`) is kept for CUDA only: elsewhere it takes the branch of "
                   "current GPUs, or asks the device's is_bf16_supported() where the branch picks torch.bfloat16; "
                   "==, != and chained comparisons -> review.")
    CATEGORY = "auto"
    ENTRIES = (12,)
    CALLS = DEVICE_PROPERTY_CALLS

    def __init__(self, ctx: RuleContext) -> None:
        super().__init__(ctx)
        self._tests: set[int] = set()

    def visit_Call(self, node: cst.Call) -> None:
        if self.qname_in(node.func, CAPABILITY_CALLS) is None:
            super().visit_Call(node)
            return
        tests = self._capability_tests(node)
        unclear = [t for t in tests if t.direction is None]
        if unclear:  # the call stays, so that a second pass finds the same question
            self.hit(node, f"{_REVIEW}: `{code(unclear[0].node)}`", category="review",
                     suggestion=self._render(node, self.CALLS[CAPABILITY]))
            return
        super().visit_Call(node)
        for test in tests:
            self._guard(test)

    def _capability_tests(self, call: cst.Call) -> list[CapabilityTest]:
        """The comparisons of the capability ``call`` returns: of the call itself, or of the names bound to it."""
        value: cst.CSTNode = call
        parent = self.parent(call)
        if isinstance(parent, cst.Subscript) and parent.value is call:  # get_device_capability()[0]
            value, parent = parent, self.parent(parent)
        if isinstance(parent, cst.Comparison):
            return [comparison_test(parent, value)]
        if isinstance(parent, cst.Assign) and parent.value is value and len(parent.targets) == 1:
            target = parent.targets[0].target
            return [t for name, _ in unpacked_names(target) for t in self._name_tests(target, name)]
        return []

    def _name_tests(self, target: cst.CSTNode, name: str) -> list[CapabilityTest]:
        """Comparisons of ``name`` (bound from the capability) wherever that binding is read."""
        scope = self.get_metadata(ScopeProvider, target, None)
        if scope is None:
            return []
        assignments = list(scope.assignments[name])
        if len(assignments) != 1:
            return []  # bound to something else too: not only the capability
        found = []
        for access in assignments[0].references:
            node: cst.CSTNode = access.node
            parent = self.parent(node)
            if isinstance(parent, cst.Subscript) and parent.value is node:  # cap[0]
                node, parent = parent, self.parent(parent)
            if isinstance(parent, cst.Comparison):
                found.append(comparison_test(parent, node))
        return found

    def _guard(self, test: CapabilityTest) -> None:
        comparison = test.node
        direction = test.direction
        if id(comparison) in self._tests or direction is None:
            return
        self._tests.add(id(comparison))
        bf16 = self._bf16_question(comparison)
        device_type = self.device_type(comparison)
        # the conditional form reads as one test only in parentheses (`if (a >= b if c else d):`)
        wrap = (bf16 is not None or not isinstance(self.parent(comparison), LOOSE_PARENTS)) and not comparison.lpar

        def transform(updated: cst.CSTNode) -> cst.CSTNode:
            assert isinstance(updated, cst.Comparison)
            text = guarded_text(code(updated.with_changes(lpar=[], rpar=[])), direction, device_type, bf16)
            if wrap:
                return expr(f"({text})")
            return expr(text).with_changes(lpar=updated.lpar, rpar=updated.rpar)

        elsewhere = ("asks the device whether it supports bfloat16 (the branch picks torch.bfloat16)" if bf16
                     else "takes the branch of current GPUs (what a capability test guards is a feature of newer "
                          "GPUs: the code asks the device where it needs one, e.g. is_bf16_supported)")
        shown = guarded_text(code(comparison), direction, device_type, bf16)
        self.hit(comparison, f"a CUDA compute-capability test: kept for CUDA; on another device the test {elsewhere}",
                 category="auto", suggestion=f"({shown})" if wrap else shown, transform=transform,
                 needs_device=True, add_imports=(("torch", None),) if bf16 else ())

    def _bf16_question(self, comparison: cst.Comparison) -> str | None:
        """The device's bf16 question where the test picks torch.bfloat16 and does not ask already."""
        child: cst.CSTNode = comparison
        parent = self.parent(child)
        while parent is not None:
            if isinstance(parent, (cst.If, cst.IfExp)) and parent.test is child:
                branches = [parent.body, parent.orelse] if parent.orelse is not None else [parent.body]
                if mentions(parent.test, "is_bf16_supported") or not any(mentions(b, "bfloat16") for b in branches):
                    return None
                ask = self.torch_text(f"torch.get_device_module({self.device_ref(comparison)}).is_bf16_supported()")
                if self.ctx.device_mode == "tpx":
                    return ask
                return f'({self.device_type(comparison)} == "cpu" or {ask})'
            if isinstance(parent, (cst.BaseSmallStatement, cst.BaseCompoundStatement)):
                return None
            child, parent = parent, self.parent(parent)
        return None


RULE = DeviceProperties
