"""Synthetic token sequences: is token 1 or token 2 the more frequent one (among noise tokens)?"""

import torch


def make_sequences(n: int = 1024, length: int = 24, vocab: int = 16, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(3, vocab, (n, length), generator=g)
    label = torch.randint(0, 2, (n,), generator=g)
    k_major = torch.randint(5, 9, (n,), generator=g)
    k_minor = k_major - torch.randint(1, 4, (n,), generator=g)
    for i in range(n):
        pos = torch.randperm(length, generator=g)
        major, minor = (2, 1) if label[i] else (1, 2)
        tokens[i, pos[:k_major[i]]] = major
        tokens[i, pos[k_major[i]:k_major[i] + k_minor[i]]] = minor
    return tokens, label
