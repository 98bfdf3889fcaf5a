"""karpathy/pytorch-made trains on binarized_mnist.npz (downloaded by hand from the MADE release);
we write a small synthetic stand-in of the same layout: float32 arrays of 0/1 pixels, 784 per image,
`train_data` and `valid_data`, drawn from a few thresholded low-rank "digit" patterns so that the
model has structure to learn. Its size is the run's size knob (the script trains 100 epochs)."""

from __future__ import annotations

import numpy as np


def images(n: int, rng: np.random.Generator, bases: np.ndarray) -> np.ndarray:
    weights = rng.normal(size=(n, bases.shape[0])) * (rng.random((n, bases.shape[0])) < 0.4)
    logits = weights @ bases + rng.normal(scale=0.3, size=(n, bases.shape[1]))
    return (logits > 0.8).astype(np.float32)


rng = np.random.default_rng(42)
bases = rng.normal(size=(6, 784))
np.savez("binarized_mnist.npz", train_data=images(200, rng, bases), valid_data=images(100, rng, bases),
         test_data=images(100, rng, bases))
