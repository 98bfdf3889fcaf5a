"""FRY062 (placement.device-type-comparison): ``<x>.type == "cuda"`` on a device or a tensor's device.

Where the code checks where things ran (an ``assert``, a test function), the comparison asks "is this
on the accelerator": ``"cuda"`` becomes the accelerator's type string (FRY001's form), which is "cuda"
on CUDA, so the check means what it meant there and holds on tpx.

Where package code branches on it (``if device.type == "cuda": tc.synchronize(device)``), the guard is
opened to every accelerator (``device.type != "cpu"``) only when what it guards is device-generic after
the migration: it calls the CUDA runtime and every such call is rewritten through the device module by
another rule (for ``!= "cuda"`` that is the ``else`` branch, which becomes the one taken off the CPU:
``device.type == "cpu"``; without an ``else`` the CUDA path is the code after the guard, left for review).
A guard that protects CUDA-only code (a flash-attn or apex kernel, a C++/CUDA extension, a
Triton kernel: :mod:`tools.codemods.cuda_guards`) stays CUDA-only, and so does one whose body keeps a
CUDA call no rule rewrites; both are reported for review, as are comparisons used as values.
"""

from __future__ import annotations

import libcst as cst

from tools.codemods.base import CodemodRule
from tools.codemods.cli_device import inside_helper
from tools.codemods.cuda_guards import cuda_only_names, guard_of, guards_cuda_only_code, in_test_code
from tools.codemods.device_strings import type_comparison_subject
from tools.codemods.nodes import code, dotted


class _CudaReferences(cst.CSTVisitor):
    """The outermost Name/Attribute chains of a guarded body (``tc.synchronize``, not ``tc``)."""

    def __init__(self) -> None:
        self.found: list[cst.CSTNode] = []

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        if dotted(node) is None:
            return True  # f(tc.x()).item: the chain holds a call, look inside it
        self.found.append(node)
        return False

    def visit_Name(self, node: cst.Name) -> None:
        self.found.append(node)


class DeviceTypeComparison(CodemodRule):
    ID = "FRY062"
    NAME = "placement.device-type-comparison"
    DESCRIPTION = ('<x>.type == "cuda" / != "cuda" (device.type, t.device.type): in an assert or a test function '
                   '-> compared with the accelerator\'s type string (FRY001\'s form; "cuda" on CUDA); a guard '
                   '(if/while/conditional expression) in other code -> device.type != "cpu" (== "cpu" for != '
                   '"cuda") when what it guards calls the CUDA runtime only through calls other rules rewrite '
                   '(synchronize, memory stats, device names); a guard of CUDA-only code (flash_attn, apex, a C++/'
                   'CUDA extension, Triton), a guard that keeps CUDA-only calls and comparisons used as values '
                   '-> review.')
    CATEGORY = "auto"
    ENTRIES = (1,)

    def __init__(self, ctx):  # type: ignore[no-untyped-def]
        super().__init__(ctx)
        self._cuda_only: frozenset[str] | None = None
        #: guard -> the comparisons in its test, decided once its body has been visited
        self._pending: dict[int, list[cst.Comparison]] = {}

    def _cuda_only_names(self) -> frozenset[str]:
        if self._cuda_only is None:
            module = self.ctx.module
            self._cuda_only = cuda_only_names(module) if module is not None else frozenset()
        return self._cuda_only

    def visit_Comparison(self, node: cst.Comparison) -> None:
        if (type_comparison_subject(node) is None or self._asks_the_accelerator(node)
                or inside_helper(node, self.parent)):  # FRY054's helper asks whether the accelerator is CUDA
            return
        found = guard_of(node, self.parent)
        if found is not None:
            guard, body = found
            if guards_cuda_only_code(guard, body, self._cuda_only_names()):
                self.hit(node, "a CUDA device-type test guarding CUDA-only code (a CUDA kernel, extension or "
                         "library): it stays CUDA-only", category="review",
                         suggestion="keep it; the PyTorch path below it runs on the accelerator")
                return
            if not in_test_code(node, self.parent):
                self._pending.setdefault(id(guard), []).append(node)
                return
        if in_test_code(node, self.parent):
            self._accelerator_type(node)
            return
        self.hit(node, "a device type compared with CUDA's by name, used as a value", category="review",
                 suggestion=f"{code(node)} -> a test on the accelerator's type")

    def _asks_the_accelerator(self, node: cst.Comparison) -> bool:
        """``device.type == "cuda"`` where ``device`` is already the accelerator (Ferry's definition): the
        question whether the accelerator is CUDA, as FRY012/FRY021 write it around CUDA-only features."""
        if not self.ctx.device_is_accelerator:
            return False
        return code(node.left) in (f"{self.ctx.device_name}.type",
                                   f"{self.ctx.torch_name}.device({self.ctx.device_name}).type")

    def _accelerator_type(self, node: cst.Comparison) -> None:
        target = node.comparisons[0]
        literal = target.comparator if isinstance(target.comparator, cst.SimpleString) else node.left
        self.string_device_hit(literal, "a device type compared with CUDA's: the accelerator's type is CUDA's there")

    def _cuda_branch(self, node: cst.Comparison, guard: cst.CSTNode, negated: bool) -> cst.CSTNode | None:
        """The part of ``guard`` that runs on CUDA: its body for ``== "cuda"``, its ``else`` for ``!= "cuda"``
        (``not`` flips it); None where that is the code after the guard (nothing to look at)."""
        current: cst.CSTNode | None = self.parent(node)
        while current is not None and current is not guard:
            if isinstance(current, cst.UnaryOperation) and isinstance(current.operator, cst.Not):
                negated = not negated
            current = self.parent(current)
        if not negated:
            return guard.body if isinstance(guard, (cst.If, cst.While, cst.IfExp)) else None
        if isinstance(guard, cst.IfExp):
            return guard.orelse
        if isinstance(guard, cst.If) and guard.orelse is not None:
            return guard.orelse
        return None

    def _decide(self, guard: cst.CSTNode) -> None:
        comparisons = self._pending.pop(id(guard), None)
        if not comparisons:
            return
        for node in comparisons:
            subject, negated = type_comparison_subject(node) or (None, False)
            assert subject is not None
            branch = self._cuda_branch(node, guard, negated)
            generic, left = (self._generic_body(branch) if branch is not None
                             else (False, "is the code after it (not looked at)"))
            if not generic:
                self.hit(node, f"a CUDA device-type guard whose CUDA branch {left}: it stays CUDA-only",
                         category="review", suggestion=f"{code(node)} -> a test on the accelerator's type once "
                         "what it guards runs there")
                continue
            op = node.comparisons[0].operator
            assert isinstance(op, (cst.Equal, cst.NotEqual))
            before, after = op.whitespace_before, op.whitespace_after
            new_op: cst.BaseCompOp = (cst.Equal(whitespace_before=before, whitespace_after=after) if negated
                                      else cst.NotEqual(whitespace_before=before, whitespace_after=after))
            text = f'{code(subject)} {"==" if negated else "!="} "cpu"'

            def transform(updated: cst.CSTNode, new_op: cst.BaseCompOp = new_op,
                          subject_first: bool = node.left is subject) -> cst.CSTNode:
                assert isinstance(updated, cst.Comparison)
                kept = updated.left if subject_first else updated.comparisons[0].comparator
                target = updated.comparisons[0].with_changes(operator=new_op, comparator=cst.SimpleString('"cpu"'))
                return updated.with_changes(left=kept, comparisons=[target])

            self.hit(node, "a CUDA device-type guard around calls rewritten through the device module: true on "
                     "every accelerator", category="auto", suggestion=text, transform=transform)

    def _generic_body(self, body: cst.CSTNode) -> tuple[bool, str]:
        """(whether every CUDA runtime call in ``body`` is rewritten by an automatic rule and there is one,
        what keeps it CUDA-only otherwise)."""
        refs = _CudaReferences()
        body.visit(refs)
        cuda = [n for n in refs.found if any(q.startswith("torch.cuda.") for q in self.qnames(n))]
        if not cuda:
            return False, "calls nothing of the CUDA runtime (nothing says it runs elsewhere)"
        rewritten = {id(h.node) for h in self.ctx.hits if h.category == "auto"}
        for ref in cuda:
            current: cst.CSTNode | None = ref
            while current is not None and current is not body and id(current) not in rewritten:
                current = self.parent(current)
            if current is None or current is body:
                return False, f"keeps {code(ref)}, which no rule rewrites"
        return True, ""

    def leave_If(self, original_node: cst.If) -> None:
        self._decide(original_node)

    def leave_While(self, original_node: cst.While) -> None:
        self._decide(original_node)

    def leave_IfExp(self, original_node: cst.IfExp) -> None:
        self._decide(original_node)


RULE = DeviceTypeComparison
