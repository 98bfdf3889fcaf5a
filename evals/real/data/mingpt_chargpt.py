"""minGPT's projects/chargpt reads input.txt from the working directory (its docstring points at
tiny shakespeare, downloaded by hand); we write a synthetic one of the same kind."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _text import play

Path("input.txt").write_text(play(40_000, seed=2), encoding="utf-8")
