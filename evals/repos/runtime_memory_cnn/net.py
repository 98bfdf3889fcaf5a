"""A tiny convolutional classifier for 1x16x16 images."""

import torch
from torch import nn


class SmallCNN(nn.Module):
    def __init__(self, n_classes: int = 4):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1),
            nn.BatchNorm2d(8),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
        )
        self.head = nn.Linear(16, n_classes)

    def forward(self, x):
        return self.head(self.features(x).flatten(1))


def synthetic_images(n: int = 256, n_classes: int = 4, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, n_classes, (n,), generator=g)
    images = torch.randn(n, 1, 16, 16, generator=g) * 0.5
    images[:, :, : 4 * (labels.max() + 1)] += labels.view(-1, 1, 1, 1).float() * 0.3
    return images, labels
