"""What Ferry shows a user names only documentation that ships with it: every string the code of
agent/, tools/ and evals/ builds (not its docstrings or comments), and every data file there (the
TOML/JSON/YAML catalogues, prices, manifests, eval case files), that names a ``.md`` page names one
under ``docs/`` that exists, never the design documents Ferry was built from (CUDA_IDIOMS.md,
NUMERICS.md, DESIGN.md); a link to a section of docs/idioms.md names an anchor that page has."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_PAGE = re.compile(r"(?<![\w/.-])((?:docs/)?[A-Za-z_-]+\.md)\b")
_ANCHOR = re.compile(r"docs/idioms\.md#([\w-]+)")
_DESIGN_INPUTS = re.compile(r"CUDA_IDIOMS|NUMERICS\.md|DESIGN\.md")
_OUTPUT_NAMES = {"pr.md", "report.md", "leaderboard.md", "profile.md"}  # files Ferry writes, not pages it links
_PACKAGES = ("agent", "tools", "evals")
_DATA = ("*.toml", "*.json", "*.yaml", "*.yml")
#: the synthetic projects the eval suite migrates are a user's code, not Ferry's text
_NOT_FERRYS = ("evals/suite/*/repo/**", "evals/real/**/repo/**")


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def _ferrys(path: Path) -> bool:
    rel = path.relative_to(ROOT)
    return not any(rel.match(pattern) for pattern in _NOT_FERRYS) and ".venv" not in rel.parts


def _problems(text: str, where: str) -> list[str]:
    bad = [f"{where}: cites {m.group(0)}, a design input no user has" for m in _DESIGN_INPUTS.finditer(text)]
    for page in _PAGE.findall(text):
        if page in _OUTPUT_NAMES:
            continue
        if not (page.startswith("docs/") and (ROOT / page).is_file()):
            bad.append(f"{where}: {page}")
    anchors = set(re.findall(r'<a id="([^"]+)"></a>', (ROOT / "docs" / "idioms.md").read_text(encoding="utf-8")))
    bad += [f"{where}: docs/idioms.md#{a} has no such anchor" for a in _ANCHOR.findall(text) if a not in anchors]
    return bad


def _strings(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = _docstrings(tree)
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip]


#: the one table that names the design inputs on purpose: it translates them, in texts a service stored
#: before its upgrade (an edit's reason in an old session), into the docs/ pages that ship
_TRANSLATOR = ("agent/redact.py", "_SHIPPED", "_DESIGN_DOC")


def _translator_lines() -> set[int]:
    tree = ast.parse((ROOT / _TRANSLATOR[0]).read_text(encoding="utf-8"))
    lines: set[int] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id in _TRANSLATOR[1:]
                                                for t in node.targets):
            lines.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    assert len(lines) >= 2, "the translation table moved: update _TRANSLATOR"
    return lines


def _code_problems(package: str) -> list[str]:
    bad = []
    translator = _translator_lines()
    for path in sorted((ROOT / package).rglob("*.py")):
        if _ferrys(path):
            rel = str(path.relative_to(ROOT))
            for line, text in _strings(path):
                if rel == _TRANSLATOR[0] and line in translator:
                    continue
                bad += _problems(text, f"{rel}:{line}")
    return bad


def test_user_facing_strings_link_only_shipped_docs() -> None:
    bad = [problem for package in _PACKAGES for problem in _code_problems(package)]
    assert not bad, bad


def test_data_files_link_only_shipped_docs() -> None:
    bad = []
    files = [p for package in _PACKAGES for pattern in _DATA for p in (ROOT / package).rglob(pattern) if _ferrys(p)]
    assert any(p.name == "residual_cuda.json" for p in files) and any(p.suffix == ".toml" for p in files)
    for path in sorted(files):
        bad += _problems(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
    assert not bad, bad


def test_the_check_catches_a_design_input_and_a_missing_anchor(tmp_path) -> None:
    """The test above can fail: the strings the tools once wrote are caught."""
    assert _problems('"## Tolerances (NUMERICS.md)"', "x")
    assert _problems("keep it (CUDA_IDIOMS 29)", "x")
    assert _problems("see docs/idioms.md#fry999", "x")
    assert not _problems("see docs/idioms.md#fry013 and docs/numerics.md", "x")
