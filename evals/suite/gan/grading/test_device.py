"""What the migrated GAN must do on the accelerator."""

import os
import subprocess
import sys

import torch
from torch import nn

from data import ring_of_gaussians
from models import Discriminator, weights_init

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def accelerator() -> torch.device:
    return torch.accelerator.current_accelerator() or torch.device("cpu")


def test_trains_both_networks_on_the_accelerator():
    import gan

    netG, netD, history = gan.train(steps=60)
    dev = accelerator()
    assert all(p.device.type == dev.type for p in netG.parameters())
    assert all(p.device.type == dev.type for p in netD.parameters())
    assert len(history) == 60 and all(torch.isfinite(torch.tensor(history)).flatten())
    assert gan.ring_error(gan.generate(netG, 500)) < 1.6  # ~1.85 before training


def test_noise_is_drawn_on_the_accelerator():
    import gan

    z = gan.sample_noise(2048)
    assert z.device.type == accelerator().type and z.shape == (2048, 8)
    assert abs(z.mean().item()) < 0.05 and abs(z.std().item() - 1) < 0.05


def test_losses_on_accelerator_tensors_match_the_cpu():
    import gan

    torch.manual_seed(0)
    netD = Discriminator()
    netD.apply(weights_init)
    real = ring_of_gaussians(32)
    fake = torch.randn(32, 2, generator=torch.Generator().manual_seed(1))
    bce = nn.BCEWithLogitsLoss()
    with torch.no_grad():
        ref_d = bce(netD(real), torch.ones(32, 1)) + bce(netD(fake), torch.zeros(32, 1))
        ref_g = bce(netD(fake), torch.ones(32, 1))
    dev_d = netD.to(accelerator())
    with torch.no_grad():
        d = gan.discriminator_loss(dev_d, real.to(accelerator()), fake.to(accelerator()))
        g = gan.generator_loss(dev_d, fake.to(accelerator()))
    assert d.device.type == accelerator().type
    torch.testing.assert_close(d.cpu(), ref_d, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(g.cpu(), ref_g, rtol=1e-4, atol=1e-5)


def test_generate_returns_host_points():
    import gan

    netG, _ = gan.build()
    pts = gan.generate(netG, 10)
    assert pts.device.type == "cpu" and pts.shape == (10, 2)


def test_script_runs():
    proc = subprocess.run(
        [sys.executable, "gan.py", "--steps", "5"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "step 4 loss_D" in proc.stdout and "final ring error" in proc.stdout


def test_real_data_is_deterministic():
    a, b = ring_of_gaussians(64), ring_of_gaussians(64)
    assert torch.equal(a, b)
    assert ((a.norm(dim=1) - 2.0).abs() < 0.3).all()
