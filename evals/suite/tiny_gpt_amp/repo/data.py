"""A synthetic character corpus: sentences from a small grammar, drawn with a fixed seed."""

import random

import torch

SUBJECTS = ["the cat", "a dog", "my friend", "the old man", "a bird"]
VERBS = ["sees", "likes", "finds", "chases", "hears"]
OBJECTS = ["the ball", "a tree", "the moon", "some bread", "the river"]


def make_corpus(n_sentences: int = 400, seed: int = 0) -> str:
    rng = random.Random(seed)
    return " ".join(
        f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)}." for _ in range(n_sentences)
    )


class CharTokenizer:
    def __init__(self, text: str):
        self.chars = sorted(set(text))
        self.stoi = {ch: i for i, ch in enumerate(self.chars)}

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> torch.Tensor:
        return torch.tensor([self.stoi[ch] for ch in text], dtype=torch.long)

    def decode(self, ids) -> str:
        return "".join(self.chars[i] for i in ids)


def get_batch(data: torch.Tensor, block_size: int, batch_size: int, generator: torch.Generator):
    """Random windows of the token stream (on the host); targets are shifted by one."""
    ix = torch.randint(len(data) - block_size - 1, (batch_size,), generator=generator)
    x = torch.stack([data[i:i + block_size] for i in ix])
    y = torch.stack([data[i + 1:i + 1 + block_size] for i in ix])
    return x, y
