import torch

from gan import build, discriminator_loss, generate, generator_loss, ring_error, train
from data import ring_of_gaussians


def test_losses_are_finite_on_gpu():
    netG, netD = build()
    real = ring_of_gaussians(16).cuda()
    fake = netG(torch.randn(16, 8, device="cuda"))
    d, g = discriminator_loss(netD, real, fake), generator_loss(netD, fake)
    assert torch.isfinite(d) and torch.isfinite(g)
    assert d.item() > 0 and g.item() > 0


def test_generator_moves_towards_the_ring():
    torch.manual_seed(0)
    netG, _, _ = train(steps=60)
    assert ring_error(generate(netG, 500)) < 1.6  # it starts at ~1.85 (all points near the origin)


def test_real_data_lies_on_the_ring():
    assert ring_error(ring_of_gaussians(500)) < 0.1
