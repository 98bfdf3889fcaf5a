"""Generator and discriminator MLPs for 2-D points."""

from torch import nn

NZ = 8  # latent size


class Generator(nn.Module):
    def __init__(self, nz: int = NZ, hidden: int = 64):
        super().__init__()
        self.main = nn.Sequential(
            nn.Linear(nz, hidden), nn.LeakyReLU(0.2),
            nn.Linear(hidden, hidden), nn.LeakyReLU(0.2),
            nn.Linear(hidden, 2),
        )

    def forward(self, z):
        return self.main(z)


class Discriminator(nn.Module):
    def __init__(self, hidden: int = 64):
        super().__init__()
        self.main = nn.Sequential(
            nn.Linear(2, hidden), nn.LeakyReLU(0.2),
            nn.Linear(hidden, hidden), nn.LeakyReLU(0.2),
            nn.Linear(hidden, 1),
        )

    def forward(self, x):
        return self.main(x)  # logits


def weights_init(m):
    if isinstance(m, nn.Linear):
        nn.init.normal_(m.weight, 0.0, 0.1)
        nn.init.zeros_(m.bias)
