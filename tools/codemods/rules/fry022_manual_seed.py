"""FRY022 (rng.manual-seed): torch.cuda.manual_seed(_all) -> torch.manual_seed (seeds every device).

A ``torch.cuda.manual_seed(S)`` statement right after ``torch.manual_seed(S)`` (the same seed) is
dropped instead: the statement before already seeds every device, CUDA included, so the rewrite
would only repeat it."""

from __future__ import annotations

import libcst as cst

from tools.codemods.generic import CallMapRule
from tools.codemods.nodes import code
from tools.codemods.tables import SEED_CALLS

_TORCH_SEED = "torch.manual_seed"
_SEEDS_EVERY_DEVICE = frozenset({_TORCH_SEED, "torch.random.manual_seed"})


def _only_call(stmt: cst.CSTNode) -> cst.Call | None:
    """The call of a line that holds nothing else (no ``;``-joined statements)."""
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return None
    inner = stmt.body[0]
    return inner.value if isinstance(inner, cst.Expr) and isinstance(inner.value, cst.Call) else None


def _has_comment(stmt: cst.SimpleStatementLine) -> bool:
    return (any(line.comment is not None for line in stmt.leading_lines)
            or stmt.trailing_whitespace.comment is not None)


def _args_text(call: cst.Call) -> str:
    """The arguments as written, spacing and a trailing comma ignored."""
    return "".join(code(a.with_changes(comma=cst.MaybeSentinel.DEFAULT)) + "," for a in call.args).replace(" ", "")


def _remove(updated: cst.CSTNode) -> cst.CSTNode:
    # libcst removes a statement whose on_leave returns this sentinel (it is not a CSTNode)
    return cst.RemoveFromParent()  # type: ignore[return-value]


class ManualSeed(CallMapRule):
    ID = "FRY022"
    NAME = "rng.manual-seed"
    DESCRIPTION = "torch.cuda.manual_seed(_all) -> torch.manual_seed (seeds every device)."
    CATEGORY = "auto"
    ENTRIES = (22,)
    CALLS = SEED_CALLS

    def visit_Call(self, node: cst.Call) -> None:
        stmt = self._repeated_seed(node)
        if stmt is None:
            super().visit_Call(node)
            return
        self.hit(stmt, f"{code(node.func)}() repeats the {_TORCH_SEED}() just before it, which seeds every "
                       "device: dropped", category="auto", suggestion=f"(nothing: {code(node)} goes)",
                 transform=_remove)

    def _repeated_seed(self, node: cst.Call) -> cst.SimpleStatementLine | None:
        """The statement of ``node`` when it is a CUDA seed that repeats the torch.manual_seed
        statement just before it (same arguments, no comment to lose); None otherwise."""
        name = self.qname_in(node.func, self.CALLS)
        if name is None or self.CALLS[name].target != _TORCH_SEED:
            return None
        stmt = self.parent(self.parent(node) or node)
        if not isinstance(stmt, cst.SimpleStatementLine) or _only_call(stmt) is not node or _has_comment(stmt):
            return None
        block = self.parent(stmt)
        body = block.body if isinstance(block, (cst.Module, cst.IndentedBlock)) else ()
        index = next((i for i, s in enumerate(body) if s is stmt), 0)
        prev = _only_call(body[index - 1]) if index > 0 else None
        if prev is None or self.qname_in(prev.func, _SEEDS_EVERY_DEVICE) is None:
            return None
        return stmt if _args_text(prev) == _args_text(node) else None


RULE = ManualSeed
