"""docs/agent.md's "The house" section is what scripts/house_doc.py makes of the layer contracts and
the modules of today: a module added, moved or re-described without regenerating it fails here."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("house_doc", ROOT / "scripts" / "house_doc.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_house_drawing_is_generated_from_the_layers_and_modules_of_today() -> None:
    house = _script()
    page = (ROOT / "docs" / "agent.md").read_text(encoding="utf-8")
    assert house.render(page) == page, "run .venv/bin/python scripts/house_doc.py"
    section = page.split(house.BEGIN)[1].split(house.END)[0]
    # every layer of both contracts is drawn, and every module of agent/migration is listed once
    for _name, layers in house.layer_contracts():
        for layer in layers:
            assert " · ".join(layer) in section
    migration = sorted(p.stem for p in (ROOT / "agent" / "migration").glob("*.py") if p.stem != "__init__")
    for stem in migration:
        assert section.count(f"| `agent.migration.{stem}` |") == 1, stem


def test_a_module_missing_from_the_drawing_makes_it_out_of_date(tmp_path: Path) -> None:
    house = _script()
    page = (ROOT / "docs" / "agent.md").read_text(encoding="utf-8")
    stale = page.replace("| `agent.migration.edges` |", "| `agent.migration.routers` |")
    assert stale != page and house.render(stale) == page
