"""Fix golden fixtures: tests/codemods/fix_fixtures/<FIX id>/<case>.in.py and .out.py.

The first line of a .in.py is ``# fix: {json}``: the keyword arguments of the fix's function besides the
source (``line``, ``op``...); FIX005's ``table`` maps a name to ``[replacement, device_kw]`` and FIX006's
``replacements`` are ``[[line, column, end_line, end_column], text]`` (libcst positions).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools.codemods.fixes import (
    ApiReplacement,
    FixResult,
    Span,
    add_factory_device,
    device_generic_api,
    float32_at,
    host_fallback,
    per_device_backend,
    replace_spans,
    statement_after_imports,
    target_matmul_precision,
)

FIXTURES = Path(__file__).parent / "fix_fixtures"
_HEADER = re.compile(r"^# fix: (\{.*\})$")


def _table(raw: dict[str, list[Any]]) -> dict[str, ApiReplacement]:
    return {k: ApiReplacement(replace=v[0], device_kw=bool(v[1])) for k, v in raw.items()}


FUNCTIONS: dict[str, Callable[..., FixResult | None]] = {
    "FIX001": add_factory_device,
    "FIX002": float32_at,
    "FIX003": host_fallback,
    "FIX004": per_device_backend,
    "FIX005": lambda source, line, table, **kw: device_generic_api(source, line, _table(table), **kw),
    "FIX006": lambda source, replacements: replace_spans(source, [(Span(*s), t) for s, t in replacements]),
    "FIX007": statement_after_imports,
    "FIX008": target_matmul_precision,
}


@dataclass(frozen=True)
class FixCase:
    fix: str
    name: str
    src: Path
    expected: Path

    @property
    def id(self) -> str:
        return f"{self.fix}/{self.name}"

    def arguments(self) -> dict[str, Any]:
        first = self.src.read_text(encoding="utf-8").split("\n", 1)[0]
        m = _HEADER.match(first)
        if m is None:
            raise ValueError(f"{self.src}: the first line must be '# fix: {{json arguments}}'")
        return json.loads(m.group(1))

    def run(self, source: str | None = None) -> FixResult | None:
        text = self.src.read_text(encoding="utf-8") if source is None else source
        return FUNCTIONS[self.fix](text, **self.arguments())


def cases() -> list[FixCase]:
    found = []
    for src in sorted(FIXTURES.glob("*/*.in.py")):
        name = src.name[: -len(".in.py")]
        found.append(FixCase(src.parent.name, name, src, src.with_name(f"{name}.out.py")))
    return found
