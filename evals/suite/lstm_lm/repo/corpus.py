"""A synthetic word corpus from a small Markov chain, and a vocabulary over it."""

import random

import torch

WORDS = (
    "<eos> the a cat dog bird man woman child sees likes chases finds eats "
    "big small red old quick ball tree house river bread fish and with on near"
).split()


def markov_text(n_words: int = 6000, seed: int = 0) -> list[str]:
    """Sentences of determiner [adjective] noun verb determiner noun [preposition ...] <eos>."""
    rng = random.Random(seed)
    dets, nouns, verbs = WORDS[1:3], WORDS[3:9], WORDS[9:14]
    adjs, objs, preps = WORDS[14:19], WORDS[19:25], WORDS[26:29]
    out: list[str] = []
    while len(out) < n_words:
        s = [rng.choice(dets)]
        if rng.random() < 0.5:
            s.append(rng.choice(adjs))
        s += [rng.choice(nouns), rng.choice(verbs), rng.choice(dets), rng.choice(objs)]
        if rng.random() < 0.3:
            s += [rng.choice(preps), rng.choice(dets), rng.choice(objs)]
        out += s + ["<eos>"]
    return out[:n_words]


class Dictionary:
    def __init__(self):
        self.word2idx = {w: i for i, w in enumerate(WORDS)}
        self.idx2word = list(WORDS)

    def __len__(self) -> int:
        return len(self.idx2word)

    def tokenize(self, words: list[str]) -> torch.Tensor:
        return torch.tensor([self.word2idx[w] for w in words], dtype=torch.long)
