"""A synthetic character corpus (a tiny grammar, seeded) and nanoGPT-style batches."""

import random

import torch

SUBJECTS = ["the cat", "a dog", "my friend", "the old man", "every child"]
VERBS = ["sees", "likes", "follows", "draws", "finds"]
OBJECTS = ["the ball", "a red kite", "the river", "some bread", "the moon"]


def make_corpus(n_sentences: int = 400, seed: int = 0) -> str:
    rng = random.Random(seed)
    lines = [f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)}." for _ in range(n_sentences)]
    return "\n".join(lines) + "\n"


class CharData:
    def __init__(self, text: str):
        self.chars = sorted(set(text))
        self.stoi = {c: i for i, c in enumerate(self.chars)}
        ids = torch.tensor([self.stoi[c] for c in text], dtype=torch.long)
        n = int(0.9 * len(ids))
        self.train, self.val = ids[:n], ids[n:]

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def decode(self, ids) -> str:
        return "".join(self.chars[i] for i in ids)
