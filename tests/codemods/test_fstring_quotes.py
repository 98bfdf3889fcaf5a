"""Requoting the string literals inside rewritten f-strings (what Python 3.11 reads)."""

from __future__ import annotations

import libcst as cst
import pytest

from tools.codemods.fstring_quotes import requote


@pytest.mark.parametrize(("src", "expected"), [
    # the f-string's own quote inside its braces takes the other one
    ('f"{(a if b else "cpu")}_t"\n', "f\"{(a if b else 'cpu')}_t\"\n"),
    ("f'{x[\"k\"]}'\n", "f'{x[\"k\"]}'\n"),  # already apart: unchanged
    ("f'{d['k']}'\n", "f'{d[\"k\"]}'\n"),
    ('rf"{"a"}\\d"\n', "rf\"{'a'}\\d\"\n"),  # the f-string's prefix and text kept
    ('f"{b"raw"}"\n', "f\"{b'raw'}\"\n"),  # a bytes literal keeps its prefix
    # a literal holding the other quote or a backslash cannot move: left for the parse check to refuse
    ('f"{"it\'s"}"\n', 'f"{"it\'s"}"\n'),
    ('f"{"a\\n"}"\n', 'f"{"a\\n"}"\n'),
    # triple-quoted f-strings and literals outside any f-string are left alone
    ('f"""{"a"}"""\n', 'f"""{"a"}"""\n'),
    ('x = "a"\n', 'x = "a"\n'),
])
def test_requote(src: str, expected: str) -> None:
    assert requote(cst.parse_module(src)).code == expected

