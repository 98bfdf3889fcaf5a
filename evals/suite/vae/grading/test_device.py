"""What the migrated VAE must do on the accelerator."""

import os
import subprocess
import sys

import torch

from data import make_images
from vae import VAE

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def accelerator() -> torch.device:
    return torch.accelerator.current_accelerator() or torch.device("cpu")


def test_trains_on_the_accelerator():
    import train

    model, history = train.train(epochs=2)
    dev = accelerator()
    assert all(p.device.type == dev.type for p in model.parameters())
    assert history[-1][0] < history[0][0]
    assert all(kl >= 0 for _, _, kl in history)


def test_reparameterisation_draws_on_the_accelerator():
    model = VAE().to(accelerator())
    mu = torch.zeros(256, 4, device=accelerator())
    logvar = torch.full((256, 4), 2 * torch.log(torch.tensor(3.0)).item(), device=accelerator())
    z = model.reparameterize(mu, logvar)
    assert z.device.type == accelerator().type
    assert 2.5 < z.std().item() < 3.5  # std = exp(logvar / 2) = 3


def test_sampling_leaves_the_training_rng_alone():
    import train

    model = VAE().to(accelerator())
    torch.manual_seed(5)
    expected = torch.randn(3, device=accelerator()).cpu()
    torch.manual_seed(5)
    first = train.sample(model, 4, seed=7)
    after = torch.randn(3, device=accelerator()).cpu()
    assert torch.equal(after, expected)
    again = train.sample(model, 4, seed=7)
    assert torch.equal(first, again)
    assert first.device.type == "cpu" and first.shape == (4, 64)
    assert 0.0 <= float(first.min()) and float(first.max()) <= 1.0


def test_reconstruction_error_matches_a_cpu_evaluation():
    import train

    model, _ = train.train(epochs=1)
    x = make_images(64, seed=1)
    on_device = train.reconstruction_error(model, x)
    cpu = VAE()
    cpu.load_state_dict({k: v.cpu() for k, v in model.state_dict().items()})
    with torch.no_grad():
        mu, _ = cpu.encode(x)
        reference = (torch.sigmoid(cpu.decode(mu)) - x).abs().mean().item()
    assert abs(on_device - reference) < 1e-4, (on_device, reference)


def test_script_runs():
    proc = subprocess.run(
        [sys.executable, "train.py", "--epochs", "1", "--samples", "4"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "epoch 0 loss" in proc.stdout and "4 samples" in proc.stdout


def test_images_are_deterministic_pixels():
    a, b = make_images(32), make_images(32)
    assert torch.equal(a, b)
    assert a.shape == (32, 64) and float(a.min()) >= 0 and float(a.max()) <= 1
