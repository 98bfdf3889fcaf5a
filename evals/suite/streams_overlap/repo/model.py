"""Two convolutional towers evaluated concurrently on two CUDA streams, then a shared head."""

import torch
from torch import nn

from data import N_CLASSES


def tower(channels: int, kernel: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(3, channels, kernel, padding=kernel // 2), nn.ReLU(),
        nn.AdaptiveAvgPool2d(2), nn.Flatten(),
    )


class TwoTowerNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.tower_a = tower(8, 3)
        self.tower_b = tower(8, 5)
        self.head = nn.Linear(2 * 8 * 4, N_CLASSES)
        self.streams = None

    def forward(self, x):
        if self.streams is None:
            self.streams = (torch.cuda.Stream(), torch.cuda.Stream())
        s_a, s_b = self.streams
        current = torch.cuda.current_stream()
        s_a.wait_stream(current)
        s_b.wait_stream(current)
        with torch.cuda.stream(s_a):
            a = self.tower_a(x)
        with torch.cuda.stream(s_b):
            b = self.tower_b(x)
        current.wait_stream(s_a)
        current.wait_stream(s_b)
        return self.head(torch.cat([a, b], dim=1))
