"""Nothing reads the migration state by key outside agent/migration/state.py: every field comes back
through its typed reader (``iteration_of(state)``, ``files_of(state)``, ``last_run(state)``...).

The check is on the syntax tree: a subscript ``state[...]`` or a call ``state.get(...)`` on the name
``state``; strings and comments do not count."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
READERS = Path("agent/migration/state.py")

#: the packages scanned, under the repository root (the eval suites' sample repositories are user code)
SCANNED_PACKAGES: tuple[str, ...] = ("agent", "evals")
NOT_OURS: tuple[str, ...] = ("evals/suite", "evals/real")


def raw_state_reads(source: str, filename: str = "<source>") -> list[int]:
    """Line numbers of ``state[...]`` and ``state.get(...)`` in ``source``."""
    def is_state(node: ast.expr) -> bool:
        return isinstance(node, ast.Name) and node.id == "state"

    return sorted(node.lineno for node in ast.walk(ast.parse(source, filename))
                  if (isinstance(node, ast.Subscript) and is_state(node.value))
                  or (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                      and is_state(node.func.value)))


def scanned_modules() -> list[Path]:
    return sorted(path.relative_to(ROOT) for package in SCANNED_PACKAGES
                  for path in (ROOT / package).rglob("*.py") if path.relative_to(ROOT) != READERS
                  and not path.relative_to(ROOT).as_posix().startswith(tuple(p + "/" for p in NOT_OURS)))


@pytest.mark.parametrize(("source", "expected"), [
    ('x = state["files"]\n', [1]),
    ('x = state.get("files") or {}\n', [1]),
    ('if True:\n    y = state.get("iteration", 0)\n', [2]),
    ('"""state["files"] in a docstring"""\n# state.get("files") in a comment\nx = "state[1]"\n', []),
    ('x = files_of(state)\ny = other["files"]\nz = options.get("a")\n', []),
    ("state[\"k\"] = 1\n", [1]),  # a write is a subscript too: the readers' module is where keys are named
])
def test_the_check_finds_subscripts_and_get_calls_on_state_only(source: str, expected: list[int]) -> None:
    assert raw_state_reads(source) == expected


def test_the_scanned_packages_exist_and_hold_modules() -> None:
    for package in SCANNED_PACKAGES:
        assert (ROOT / package / "__init__.py").is_file(), package
    assert Path("agent/migration/edges.py") in scanned_modules()
    assert READERS not in scanned_modules()


def test_no_raw_state_read_outside_the_readers_module() -> None:
    found = [f"{path}:{line}" for path in scanned_modules()
             for line in raw_state_reads((ROOT / path).read_text(encoding="utf-8"), str(path))]
    assert not found, ("raw reads of the migration state (use or add a typed reader in agent/migration/state.py): "
                       + ", ".join(found))
