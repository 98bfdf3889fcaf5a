"""docs/agent.md's drawing of the migration graph is what scripts/graph_doc.py draws from the compiled graph
today (every node, every edge a router may take)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from agent.migration.graph import NODES

ROOT = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("graph_doc", ROOT / "scripts" / "graph_doc.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_page_holds_the_drawing_of_the_graph_of_today():
    module = _script()
    page = module.PAGE.read_text(encoding="utf-8")
    assert module.render(page) == page, "run .venv/bin/python scripts/graph_doc.py"
    drawing = page.split(module.BEGIN)[1].split(module.END)[0]
    assert "```mermaid" in drawing and "target_run --> await_reference;" in drawing
    assert "parity -.-> llm_fix;" in drawing and "report --> __end__;" in drawing
    assert all(f"\t{name}({name})" in drawing for name, _ in NODES)


def test_a_changed_drawing_is_written_between_the_markers_only():
    module = _script()
    stale = f"intro\n{module.BEGIN}\n```\nSTART -> ingest\n```\n{module.END}\nafter\n"
    text = module.render(stale)
    assert text.startswith(f"intro\n{module.BEGIN}\n```mermaid\n") and text.endswith(f"{module.END}\nafter\n")
    assert "START -> ingest" not in text and module.drawing() in text
    with pytest.raises(ValueError):
        module.render("a page without the markers")
