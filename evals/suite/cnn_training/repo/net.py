"""A small convolutional classifier for 1x16x16 images, and synthetic images to train it on."""

import torch
from torch import nn


class SmallCNN(nn.Module):
    def __init__(self, n_classes: int = 4, width: int = 8):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, width, 3, padding=1),
            nn.BatchNorm2d(width),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(width, 2 * width, 3, padding=1),
            nn.BatchNorm2d(2 * width),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
        )
        self.head = nn.Linear(2 * width, n_classes)

    def forward(self, x):
        return self.head(self.features(x).flatten(1))


def synthetic_images(n: int = 256, n_classes: int = 4, seed: int = 0):
    """Noise images with a bright horizontal band whose row depends on the label."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, n_classes, (n,), generator=g)
    images = 0.5 * torch.randn(n, 1, 16, 16, generator=g)
    rows = (labels * (16 // n_classes)).view(n, 1, 1, 1)
    band = torch.arange(16).view(1, 1, 16, 1)
    images = images + ((band >= rows) & (band < rows + 16 // n_classes)).float()
    return images, labels
