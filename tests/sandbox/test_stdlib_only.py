"""sandbox/ imports the standard library only (docs/sandbox.md): every import in its files, at the top
or inside a function, names a standard-library module or sandbox itself. The import-linter contract
names the third-party packages Ferry installs; this also catches one it does not name yet."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

SANDBOX = Path(__file__).resolve().parents[2] / "sandbox"


def _imports(path: Path) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            found.append((node.lineno, "sandbox" if node.level else node.module or ""))  # relative: within sandbox
    return found


def test_sandbox_imports_the_standard_library_only() -> None:
    files = sorted(SANDBOX.rglob("*.py"))
    assert SANDBOX / "warm" / "child.py" in files
    foreign = [f"{path.relative_to(SANDBOX.parent)}:{line}: {name}" for path in files for line, name in _imports(path)
               if name.partition(".")[0] not in (*sys.stdlib_module_names, "sandbox")]
    assert foreign == []
