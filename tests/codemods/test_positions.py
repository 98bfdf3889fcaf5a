"""positions_of gives libcst's PositionProvider range for any node asked about (golden fixtures)."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from tools.codemods.positions import positions_of

FIXTURES = Path(__file__).parent / "fixtures"


def test_positions_of_matches_position_provider() -> None:
    for path in sorted(FIXTURES.rglob("*.py"))[::2]:
        module = cst.parse_module(path.read_text(encoding="utf-8"))
        want = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
        nodes = list(want)[::5]
        assert positions_of(module, nodes) == {n: want[n] for n in nodes}, path


def test_positions_of_nested_and_hoisted_nodes() -> None:
    """A node and its own children asked together; a statement whose range ends at its last child."""
    module = cst.parse_module("import torch\n\n\n@dec\ndef f(x):\n    if x:\n        return x.cuda()\n    pass\n")
    want = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    fn = module.body[1]
    assert isinstance(fn, cst.FunctionDef)
    nodes = [fn, fn.body, fn.body.body[0], fn.decorators[0], module.body[0]]
    assert positions_of(module, nodes) == {n: want[n] for n in nodes}
    assert positions_of(module, []) == {}
