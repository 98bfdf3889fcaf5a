"""Small, exact source edits for the fix rules (positions from :mod:`ast`, results re-parsed)."""

from __future__ import annotations

import ast
import logging
import re

from agent.errors import EditRejected

logger = logging.getLogger(__name__)

FACTORIES = frozenset(
    {"zeros", "ones", "empty", "full", "rand", "randn", "randint", "randperm", "arange", "linspace",
     "logspace", "eye", "tensor", "as_tensor", "normal", "bernoulli", "tril_indices", "triu_indices"}
)


def check_parses(text: str, rel: str) -> None:
    try:
        ast.parse(text, filename=rel)
    except SyntaxError as exc:
        raise EditRejected(f"the edited {rel} does not parse: {exc.msg} at line {exc.lineno}") from exc


def parse(text: str, rel: str) -> ast.Module | None:
    try:
        return ast.parse(text, filename=rel)
    except SyntaxError:
        return None


def lines_of(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def replace_line(text: str, lineno: int, new_line: str) -> str:
    lines = lines_of(text)
    lines[lineno - 1] = new_line
    return "".join(lines)


def dotted_name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = dotted_name(node.value)
        return f"{base}.{node.attr}" if base else node.attr
    return ""


def calls_at(tree: ast.Module, lineno: int) -> list[ast.Call]:
    """Calls whose span covers ``lineno``, innermost first."""
    found = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and n.lineno <= lineno <= (n.end_lineno or n.lineno)]
    return sorted(found, key=lambda c: ((c.end_lineno or c.lineno) - c.lineno, -c.col_offset))


def has_kwarg(call: ast.Call, name: str) -> bool:
    return any(k.arg == name for k in call.keywords)


def _offset(lines: list[str], lineno: int, col: int) -> int:
    """Character offset in the joined text of (1-based line, UTF-8 byte column)."""
    prefix = sum(len(line) for line in lines[: lineno - 1])
    return prefix + len(lines[lineno - 1].encode("utf-8")[:col].decode("utf-8", errors="ignore"))


def insert_kwarg(text: str, call: ast.Call, kwarg_src: str) -> str:
    """Add ``kwarg_src`` (e.g. ``device=device``) as the last argument of ``call``."""
    lines = lines_of(text)
    close = _offset(lines, call.end_lineno or call.lineno, (call.end_col_offset or 1) - 1)
    if text[close] != ")":
        raise EditRejected(f"cannot locate the closing parenthesis of the call at line {call.lineno}")
    head = text[:close]
    if call.args or call.keywords:
        stripped = head.rstrip()
        sep = " " if stripped.endswith(",") else ", "
        return stripped + sep + kwarg_src + text[close:]
    return head + kwarg_src + text[close:]


def wrap_call(text: str, node: ast.AST, prefix: str, suffix: str) -> str:
    """Put ``prefix`` before and ``suffix`` after the source of ``node``."""
    lines = lines_of(text)
    start = _offset(lines, node.lineno, node.col_offset)
    end = _offset(lines, node.end_lineno or node.lineno, node.end_col_offset or 0)
    return text[:start] + prefix + text[start:end] + suffix + text[end:]


def segment(text: str, node: ast.AST) -> str:
    return ast.get_source_segment(text, node) or ""


def replace_node(text: str, node: ast.AST, new_src: str) -> str:
    lines = lines_of(text)
    start = _offset(lines, node.lineno, node.col_offset)
    end = _offset(lines, node.end_lineno or node.lineno, node.end_col_offset or 0)
    return text[:start] + new_src + text[end:]


def imports_torch_as_torch(tree: ast.Module) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name == "torch" and a.asname in (None, "torch") for a in node.names):
            return True
    return False


def top_import_end(tree: ast.Module) -> int:
    """The last line of the module's leading block of docstring/imports/__future__ (0 if none)."""
    end = 0
    for i, node in enumerate(tree.body):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            end = node.end_lineno or node.lineno
        elif i == 0 and isinstance(node, ast.Expr) and isinstance(getattr(node, "value", None), ast.Constant):
            end = node.end_lineno or node.lineno
        elif isinstance(node, ast.Try) and all(isinstance(b, (ast.Import, ast.ImportFrom)) for b in node.body):
            end = node.end_lineno or node.lineno
        else:
            break
    return end


def insert_after_line(text: str, lineno: int, new_src: str) -> str:
    lines = lines_of(text)
    if lines and not lines[-1].endswith("\n") and lineno >= len(lines):
        lines[-1] += "\n"
    lines.insert(lineno, new_src if new_src.endswith("\n") else new_src + "\n")
    return "".join(lines)


NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
