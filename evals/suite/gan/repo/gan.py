"""Train a GAN on the 2-D ring, DCGAN-style (two Adam optimisers, BCE losses).

Usage: python gan.py [--steps N] [--batch B]
"""

import argparse

import torch
from torch import nn

from data import RADIUS, ring_of_gaussians
from models import NZ, Discriminator, Generator, weights_init

criterion = nn.BCEWithLogitsLoss()


def sample_noise(n: int) -> torch.Tensor:
    return torch.randn(n, NZ, device="cuda")


def discriminator_loss(netD, real, fake):
    """Real points labelled 1, generated points 0."""
    ones = torch.ones(real.shape[0], 1, device="cuda")
    zeros = torch.zeros(fake.shape[0], 1, device="cuda")
    return criterion(netD(real), ones) + criterion(netD(fake), zeros)


def generator_loss(netD, fake):
    """Non-saturating loss: the generator wants its points labelled real."""
    return criterion(netD(fake), torch.full((fake.shape[0], 1), 1.0, device="cuda"))


def build(seed: int = 0):
    torch.manual_seed(seed)
    netG, netD = Generator().cuda(), Discriminator().cuda()
    netG.apply(weights_init)
    netD.apply(weights_init)
    ngpu = torch.cuda.device_count()
    if ngpu > 1:
        netG = nn.DataParallel(netG, list(range(ngpu)))
        netD = nn.DataParallel(netD, list(range(ngpu)))
    return netG, netD


def ring_error(points: torch.Tensor) -> float:
    """Mean distance of points from the ring: 0 for a perfect generator."""
    return (points.norm(dim=1) - RADIUS).abs().mean().item()


@torch.no_grad()
def generate(netG, n: int) -> torch.Tensor:
    return netG(sample_noise(n)).cpu()


def train(steps: int = 150, batch: int = 64, lr: float = 5e-3, seed: int = 0):
    netG, netD = build(seed)
    optD = torch.optim.Adam(netD.parameters(), lr=lr, betas=(0.5, 0.999))
    optG = torch.optim.Adam(netG.parameters(), lr=lr, betas=(0.5, 0.999))
    real_data = ring_of_gaussians(batch * steps, seed=seed).cuda()
    fixed_noise = sample_noise(256)
    history = []
    for step in range(steps):
        real = real_data[step * batch:(step + 1) * batch]
        fake = netG(sample_noise(batch))

        optD.zero_grad()
        lossD = discriminator_loss(netD, real, fake.detach())
        lossD.backward()
        optD.step()

        optG.zero_grad()
        lossG = generator_loss(netD, fake)
        lossG.backward()
        optG.step()

        history.append((lossD.item(), lossG.item()))
        if step % 20 == 0 or step == steps - 1:
            with torch.no_grad():
                err = ring_error(netG(fixed_noise))
            print(f"step {step} loss_D {lossD.item():.4f} loss_G {lossG.item():.4f} ring_error {err:.4f}")
    return netG, netD, history


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lr", type=float, default=5e-3)
    args = parser.parse_args(argv)
    netG, _, _ = train(args.steps, args.batch, args.lr)
    print(f"final ring error {ring_error(generate(netG, 1000)):.4f}")


if __name__ == "__main__":
    main()
