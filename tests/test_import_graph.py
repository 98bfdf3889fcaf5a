"""The import graph of Ferry's packages: no circles, no import up a layer, one door into a migration.

Every import counts, the ones inside functions and under ``TYPE_CHECKING`` included (grimp reads
them all). The layers are the import-linter contracts of pyproject.toml, read from there, so the
drawing in docs/agent.md, ``lint-imports`` and this test check one definition.
"""

from __future__ import annotations

import sys
import tomllib
from collections.abc import Iterable, Mapping
from functools import cache
from pathlib import Path
from typing import Any

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("agent", "tools", "sandbox", "backend", "backend_autoload", "evals")


@cache
def _graph() -> Any:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    return grimp.build_graph(*PACKAGES, include_external_packages=False, cache_dir=None)


def _edges() -> dict[str, set[str]]:
    g = _graph()
    return {m: set(g.find_modules_directly_imported_by(m)) for m in g.modules}


def strongly_connected(edges: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The groups of two or more nodes that reach each other (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    groups: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        top = stack.pop()
                        on_stack.discard(top)
                        group.append(top)
                        if top == node:
                            break
                    if len(group) > 1:
                        groups.append(sorted(group))
    return sorted(groups)


def test_the_circle_finder_finds_a_circle_and_nothing_else() -> None:
    assert strongly_connected({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert strongly_connected({"a": {"b"}, "b": set(), "c": {"b"}}) == []


def _where(importer: str, imported: str) -> str:
    details = _graph().get_import_details(importer=importer, imported=imported)
    lines = ", ".join(f"l.{d['line_number']}" for d in details)
    return f"{importer} -> {imported} ({lines})"


def test_no_module_imports_itself_back() -> None:
    circles = strongly_connected(_edges())
    assert circles == [], "import circles (break each by moving the shared part down): " + "; ".join(
        " <-> ".join(c) for c in circles)


def _package_of(module: str) -> str:
    """The unit a circle between packages is counted at: agent.migration's and agent.prbot's parts,
    each other subpackage or module of a top-level package, the top-level package itself."""
    parts = module.split(".")
    if parts[:2] in (["agent", "migration"], ["agent", "prbot"]) and len(parts) > 2:
        return ".".join(parts[:3])
    return ".".join(parts[:2])


def test_no_package_imports_another_that_imports_it_back() -> None:
    units: dict[str, set[str]] = {}
    for importer, imported in _edges().items():
        for target in imported:
            a, b = _package_of(importer), _package_of(target)
            units.setdefault(a, set())
            if a != b:
                units[a].add(b)
    circles = strongly_connected(units)
    assert circles == [], "packages that import each other: " + "; ".join(" <-> ".join(c) for c in circles)


def _layer_contracts() -> list[dict[str, Any]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts = config["tool"]["importlinter"]["contracts"]
    return [c for c in contracts if c["type"] == "layers"]


def test_the_house_has_layer_contracts_for_agent_and_tools() -> None:
    names = [c["name"] for c in _layer_contracts()]
    assert any(n.startswith("agent's layers") for n in names) and any(n.startswith("tools' layers") for n in names)


@pytest.mark.parametrize("contract", _layer_contracts(), ids=lambda c: c["name"].split(":")[0])
def test_no_import_goes_up_a_layer(contract: dict[str, Any]) -> None:
    g = _graph()
    layers = []
    for spec in contract["layers"]:
        names = {n.strip() for n in spec.replace(":", "|").split("|")}
        layers.append(grimp.Layer(*names, independent="|" in spec))
    problems = g.find_illegal_dependencies_for_layers(layers=layers)
    found = sorted({_where(h, t) for dep in problems for route in dep.routes for h in route.heads
                    for t in route.tails if g.direct_import_exists(importer=h, imported=t)}
                   | {f"{dep.importer} -> {dep.imported} (through other modules)" for dep in problems
                      if any(route.middle for route in dep.routes)})
    assert not problems, "imports up the layers: " + "; ".join(found)


def test_an_import_up_a_layer_is_found(tmp_path: Path) -> None:
    """The layer check is not vacuous: a lower layer importing a higher one is reported."""
    g = grimp.ImportGraph()
    for m in ("pkg", "pkg.high", "pkg.low"):
        g.add_module(m)
    g.add_import(importer="pkg.low", imported="pkg.high", line_number=3, line_contents="import pkg.high")
    found = g.find_illegal_dependencies_for_layers(layers=[grimp.Layer("pkg.high"), grimp.Layer("pkg.low")])
    assert [(d.importer, d.imported) for d in found] == [("pkg.low", "pkg.high")]
