"""FIX007 (module.statement-after-imports): a statement that uses torch, right after the module's
leading docstring and imports."""

from __future__ import annotations

import re

import libcst as cst

from tools.codemods.device import torch_alias
from tools.codemods.fixes.base import Fix, FixResult, Span, apply
from tools.codemods.nodes import header_length

_TORCH_RE = re.compile(r"(?<![\w.])torch\.")


class StatementAfterImports(Fix):
    ID = "FIX007"
    NAME = "module.statement-after-imports"
    DESCRIPTION = ("A statement (e.g. torch.set_float32_matmul_precision(\"highest\")) inserted right after the "
                   "module's leading docstring and imports (try: blocks that only import count as imports), "
                   "torch spelled as the module imports it; not in a module that does not import torch at module "
                   "level.")

    def __init__(self, statement: str) -> None:
        super().__init__()
        self.statement = statement

    def plan(self, module: cst.Module) -> None:
        torch = torch_alias(module)
        if torch is None:
            self.warn("the module does not import torch at module level")
            return
        text = self.statement if torch == "torch" else _TORCH_RE.sub(torch + ".", self.statement)
        try:
            stmt = cst.parse_statement(text if text.endswith("\n") else text + "\n")
        except cst.ParserSyntaxError:
            self.warn(f"{text.strip()[:60]!r} is not a statement")
            return
        index = header_length(module, try_imports=True)
        line = self.span(module.body[index - 1]).end_line + 1 if index else 1

        def insert(updated: cst.Module) -> cst.Module:
            body = list(updated.body)
            body.insert(index, stmt)
            return updated.with_changes(body=body)

        self.edit(module, insert, site=Span(line, 0, line, len(text.rstrip("\n"))))


def statement_after_imports(source: str, statement: str, *, filename: str = "<source>") -> FixResult | None:
    """``statement`` inserted after the module's docstring and imports."""
    return apply(StatementAfterImports(statement), source, filename)


FIX = StatementAfterImports
