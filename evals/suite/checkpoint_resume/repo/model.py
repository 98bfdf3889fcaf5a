"""A small MLP classifier for 2-D points."""

from torch import nn

from data import N_CLASSES


class BlobNet(nn.Module):
    def __init__(self, hidden: int = 32):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(2, hidden), nn.ReLU(),
            nn.Linear(hidden, hidden), nn.ReLU(),
            nn.Linear(hidden, N_CLASSES),
        )

    def forward(self, x):
        return self.net(x)
