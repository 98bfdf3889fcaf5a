"""Synthetic tabular data made with numpy (float64, as numpy makes it)."""

import numpy as np


def make_regression(n: int = 384, n_features: int = 12, seed: int = 0):
    rng = np.random.default_rng(seed)
    features = rng.normal(size=(n, n_features)).astype(np.float32)
    coef = rng.normal(size=(n_features,))
    targets = features @ coef + 0.05 * rng.normal(size=n)  # float64
    return features, targets
