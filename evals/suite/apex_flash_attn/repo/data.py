"""Synthetic token streams with structure a tiny LM can learn: repeating arithmetic progressions."""

import torch


def make_stream(n: int = 20000, vocab: int = 24, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    out, i = [], 0
    while i < n:
        start, step, length = (int(v) for v in torch.randint(0, vocab, (3,), generator=g))
        step, length = step % 4 + 1, length % 8 + 4
        out.extend((start + step * j) % vocab for j in range(length))
        i += length
    return torch.tensor(out[:n])
