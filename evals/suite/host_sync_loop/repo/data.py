"""Synthetic 'sensor readings' classification data (four classes, 20 features)."""

import torch

NUM_FEATURES = 20
NUM_CLASSES = 4


def make_dataset(n: int = 2048, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    centers = 0.6 * torch.randn(NUM_CLASSES, NUM_FEATURES, generator=g)
    labels = torch.randint(0, NUM_CLASSES, (n,), generator=g)
    features = centers[labels] + 1.5 * torch.randn(n, NUM_FEATURES, generator=g)
    return features, labels
