"""What Ferry shows a user names only documentation that ships with it: every string the agent's code
builds (not its docstrings or comments) that names a ``.md`` page names one under ``docs/`` that exists,
never the design documents Ferry was built from (CUDA_IDIOMS.md, NUMERICS.md, DESIGN.md)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_PAGE = re.compile(r"(?<![\w/.-])((?:docs/)?[A-Za-z_-]+\.md)\b")
_OUTPUT_NAMES = {"pr.md", "report.md", "leaderboard.md", "profile.md"}  # files Ferry writes, not pages it links


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def test_user_facing_strings_link_only_shipped_docs() -> None:
    bad = []
    for path in sorted((ROOT / "agent").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = _docstrings(tree)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Constant) and isinstance(node.value, str)) or id(node) in skip:
                continue
            for page in _PAGE.findall(node.value):
                if page in _OUTPUT_NAMES:
                    continue
                if not (page.startswith("docs/") and (ROOT / page).is_file()):
                    bad.append(f"{path.relative_to(ROOT)}:{node.lineno}: {page}")
    assert not bad, bad
