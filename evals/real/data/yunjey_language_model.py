"""pytorch-tutorial's language model trains on data/train.txt, the Penn Treebank training text (about
5 MB, committed in the repository but absent from the mirror: the fetch leaves its largest files out).
We write a small synthetic file of the same form (one lower-case sentence a line)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _text import plain_lines

data = Path("tutorials/02-intermediate/language_model/data")
data.mkdir(parents=True, exist_ok=True)
(data / "train.txt").write_text(plain_lines(72, seed=3, min_words=6, max_words=12), encoding="utf-8")
