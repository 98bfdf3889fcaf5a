"""agent/migration/paths.py: the one module that says where Ferry keeps things."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from agent.ids import InvalidId
from agent.migration import paths

ROOT = Path(__file__).resolve().parents[2]
#: the directory names of Ferry's layout: joined onto a root in paths.py only
LAYOUT_NAMES = ("workspaces", "artifacts", "sessions", "knowledge")


def test_the_layout_under_the_state_and_data_dirs(tmp_path: Path) -> None:
    sdir = paths.state_dir(tmp_path / "state")
    assert sdir.is_dir()
    assert paths.workspaces_root(sdir, "m1") == sdir / "workspaces" / "m1"
    assert paths.run_artifacts(sdir, "m1", "tests-2") == sdir / "artifacts" / "m1" / "tests-2"
    assert paths.reference_artifacts(sdir, "m1") == sdir / "artifacts" / "m1" / "reference"
    assert paths.session_repo(tmp_path, "s1") == tmp_path / "sessions" / "s1" / "repo"
    assert paths.session_out(tmp_path, "s1", 3) == tmp_path / "sessions" / "s1" / "out-3"


@pytest.mark.parametrize("bad", ["../x", "a/b", ""])
def test_an_id_that_is_not_a_plain_name_is_refused(tmp_path: Path, bad: str) -> None:
    for join in (lambda: paths.artifacts_root(tmp_path, bad), lambda: paths.session_dir(tmp_path, bad)):
        with pytest.raises(InvalidId):
            join()


def test_the_knowledge_base_is_the_variables_else_under_the_default_state_dir(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("FERRY_KB_PATH", str(tmp_path / "kb"))
    assert paths.knowledge_dir() == tmp_path / "kb"
    monkeypatch.delenv("FERRY_KB_PATH")
    assert paths.knowledge_dir() == paths.DEFAULT_STATE_DIR.expanduser() / "knowledge"


def _layout_joins(tree: ast.AST) -> list[tuple[int, str]]:
    return [(node.lineno, node.right.value) for node in ast.walk(tree)
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and isinstance(node.right, ast.Constant)
            and node.right.value in LAYOUT_NAMES]


def test_no_other_module_joins_the_layouts_directories() -> None:
    modules = [p for package in ("agent", "evals") for p in (ROOT / package).rglob("*.py")
               if p != ROOT / "agent" / "migration" / "paths.py"]
    found = [f"{p.relative_to(ROOT)}:{line} / {name!r}" for p in modules
             for line, name in _layout_joins(ast.parse(p.read_text(encoding="utf-8")))]
    assert not found, found


def test_the_join_check_finds_a_join() -> None:
    assert _layout_joins(ast.parse('x = root / "artifacts" / mid\ny = "artifacts"\n')) == [(1, "artifacts")]
