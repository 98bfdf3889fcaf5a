"""Golden fixture discovery: tests/codemods/fixtures/<RULE>/<case>.in.py and .out.py.

Header directives (comment lines in the .in.py):
  # fixture: no-run: <why>      the out file is not run (needs hardware/libraries)
  # fixture: cpu-only: <why>    the out file runs on CPU only (not compared on tpx)
  # fixture: device=tpx         rewrite with --device tpx instead of the default
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures"
_DIRECTIVE = re.compile(r"^# fixture: (no-run|cpu-only|device=tpx)", re.M)


@dataclass(frozen=True)
class Case:
    rule: str
    name: str
    src: Path
    expected: Path

    @property
    def id(self) -> str:
        return f"{self.rule}/{self.name}"

    @property
    def directives(self) -> set[str]:
        return set(_DIRECTIVE.findall(self.src.read_text(encoding="utf-8")))

    @property
    def device(self) -> str:
        return "tpx" if "device=tpx" in self.directives else "accelerator"

    @property
    def runnable(self) -> bool:
        return "no-run" not in self.directives


def cases() -> list[Case]:
    found = []
    for src in sorted(FIXTURES.glob("*/*.in.py")):
        name = src.name[: -len(".in.py")]
        found.append(Case(src.parent.name, name, src, src.with_name(f"{name}.out.py")))
    return found
