"""FIX008 (dtype.target-matmul-precision): full-fp32 matmuls on the migration's target device only,
placed where no later module-level precision setting of the program undoes it."""

from __future__ import annotations

import re

import libcst as cst

from tools.codemods.device import torch_alias
from tools.codemods.fixes.base import Fix, FixResult, Span, apply, nodes_of
from tools.codemods.nodes import header_length

_TORCH_RE = re.compile(r"(?<![\w.])torch\.")

#: what marks the statement this fix writes (so a second application is a no-op)
MARKER = "ferry: target matmul precision"

#: the statement: only where the current accelerator is tpx, the migration's target, whose float32
#: matmuls round their inputs to bf16 unless asked for "highest" (real CUDA, and any other device, keeps
#: the program's own TF32 choice); its test names no "cuda", which would read as a CUDA idiom left over
STATEMENT = (
    'if torch.accelerator.is_available() and torch.accelerator.current_accelerator().type == "tpx":\n'
    f'    torch.set_float32_matmul_precision("highest")  # {MARKER}: full fp32 matmuls on tpx\n'
)

#: the call that sets the float32 matmul precision, and the flags that set a float32 precision when
#: assigned: a statement doing either undoes (or may undo) an earlier set_float32_matmul_precision("highest")
PRECISION_CALLS = frozenset({"torch.set_float32_matmul_precision"})
PRECISION_FLAGS = frozenset({
    "torch.backends.cuda.matmul.allow_tf32",
    "torch.backends.cuda.matmul.fp32_precision",
    "torch.backends.cudnn.allow_tf32",
    "torch.backends.cudnn.fp32_precision",
    "torch.backends.cudnn.conv.fp32_precision",
    "torch.backends.fp32_precision",
    "torch.backends.mkldnn.matmul.fp32_precision",
})


class TargetMatmulPrecision(Fix):
    ID = "FIX008"
    NAME = "dtype.target-matmul-precision"
    DESCRIPTION = ('`if torch.accelerator.is_available() and torch.accelerator.current_accelerator().type == "tpx": '
                   'torch.set_float32_matmul_precision("highest")` (full fp32 matmuls on the target device only, '
                   "whose matmuls round float32 inputs to bf16 otherwise; real CUDA keeps the program's TF32 "
                   "choice) inserted after the module's docstring and imports, or after its last module-level "
                   "statement that sets a float32 precision (set_float32_matmul_precision, allow_tf32, "
                   "fp32_precision), so that no later module-level line undoes it; a warning "
                   "when a function of the module also sets one (a call may still undo it); torch spelled as the "
                   "module imports it; not in a module that does not import torch at module level.")

    def plan(self, module: cst.Module) -> None:
        torch = torch_alias(module)
        if torch is None:
            self.warn("the module does not import torch at module level")
            return
        if MARKER in module.code:
            return
        text = STATEMENT if torch == "torch" else _TORCH_RE.sub(torch + ".", STATEMENT)
        stmt = cst.parse_statement(text)
        index = header_length(module, try_imports=True)
        main_guard = False
        for i, statement in enumerate(module.body):
            if isinstance(statement, (cst.FunctionDef, cst.ClassDef)) or main_guard or _is_main_guard(statement):
                main_guard = main_guard or _is_main_guard(statement)  # what runs after it runs after main()
                if self._sets_precision(statement):
                    where = (statement.name.value if isinstance(statement, (cst.FunctionDef, cst.ClassDef))
                             else "the main guard" if _is_main_guard(statement) else "a statement after the main guard")
                    self.warn(f"{where} (line {self.span(statement).line}) also sets a float32 precision: "
                              "running it undoes the target's 'highest'")
            elif i >= index and self._sets_precision(statement):
                index = i + 1
        line = self.span(module.body[index - 1]).end_line + 1 if index else 1

        def insert(updated: cst.Module) -> cst.Module:
            body = list(updated.body)
            body.insert(index, stmt)
            return updated.with_changes(body=body)

        self.edit(module, insert, site=Span(line, 0, line + 1, 0))

    def _sets_precision(self, node: cst.CSTNode) -> bool:
        """Whether ``node`` calls set_float32_matmul_precision or assigns a precision flag (reads do not count)."""
        if any(self.qname_in(call.func, PRECISION_CALLS) is not None for call in nodes_of(node, cst.Call)):
            return True
        targets = [t.target for a in nodes_of(node, cst.Assign) for t in a.targets]
        targets += [a.target for a in nodes_of(node, (cst.AnnAssign, cst.AugAssign))]
        return any(isinstance(t, cst.Attribute) and self.qname_in(t, PRECISION_FLAGS) is not None for t in targets)


def _is_main_guard(statement: cst.CSTNode) -> bool:
    """``if __name__ == "__main__":``."""
    if not isinstance(statement, cst.If) or not isinstance(statement.test, cst.Comparison):
        return False
    return isinstance(statement.test.left, cst.Name) and statement.test.left.value == "__name__"


def target_matmul_precision(source: str, *, filename: str = "<source>") -> FixResult | None:
    """Full fp32 matmuls on the target device, after the program's own module-level precision settings."""
    return apply(TargetMatmulPrecision(), source, filename)


FIX = TargetMatmulPrecision
