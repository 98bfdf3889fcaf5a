"""karpathy/llama2.c's train.py reads pretokenized TinyStories shards (tinystories.py downloads about
1.5 GB and tokenizes it with sentencepiece). With --vocab_source=custom --vocab_size=512 it reads
data/tok512/*.bin (uint16 token ids; shard 0 is the validation split): we write two small shards of
synthetic text's word ids below 512, the layout PretokDataset memory-maps."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _text import words

out = Path("data/tok512")
out.mkdir(parents=True, exist_ok=True)
for shard in range(2):
    ws = words(6000, seed=10 + shard)
    vocab = {w: i + 1 for i, w in enumerate(sorted(set(ws)))}
    ids = np.array([vocab[w] % 511 + 1 for w in ws], dtype=np.uint16)
    ids.tofile(out / f"data{shard:02d}.bin")
