import torch.nn as nn

from data import NUM_CLASSES, NUM_FEATURES


def build_model(hidden: int = 64) -> nn.Module:
    return nn.Sequential(
        nn.Linear(NUM_FEATURES, hidden),
        nn.BatchNorm1d(hidden),
        nn.ReLU(),
        nn.Linear(hidden, hidden),
        nn.ReLU(),
        nn.Linear(hidden, NUM_CLASSES),
    )
