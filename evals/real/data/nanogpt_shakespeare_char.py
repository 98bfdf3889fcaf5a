"""nanoGPT's shakespeare_char data: data/shakespeare_char/prepare.py downloads tiny shakespeare
(about 1 MB) when its input.txt is absent; we write a synthetic input.txt of the same kind and run the
repository's own prepare.py, which writes train.bin, val.bin and meta.pkl next to it."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _text import play

here = Path("data/shakespeare_char")
(here / "input.txt").write_text(play(60_000, seed=1), encoding="utf-8")
runpy.run_path(str(here / "prepare.py"), run_name="__main__")
