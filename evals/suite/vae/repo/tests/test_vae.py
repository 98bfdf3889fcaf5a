import torch

from data import make_images
from train import sample, train
from vae import VAE, vae_loss


def test_forward_on_gpu():
    model = VAE().cuda()
    x = make_images(8).cuda()
    logits, mu, logvar = model(x)
    assert logits.shape == (8, 64) and mu.shape == logvar.shape == (8, 4)
    loss, recon, kl = vae_loss(logits, x, mu, logvar)
    assert kl.item() >= 0 and recon.item() > 0


def test_reparameterisation_is_random_but_seeded():
    model = VAE().cuda()
    mu = torch.zeros(4, 4, device="cuda")
    logvar = torch.zeros(4, 4, device="cuda")
    torch.cuda.manual_seed(0)
    torch.manual_seed(0)
    a = model.reparameterize(mu, logvar)
    torch.cuda.manual_seed(0)
    torch.manual_seed(0)
    b = model.reparameterize(mu, logvar)
    assert torch.equal(a, b)
    assert a.std() > 0.1


def test_training_lowers_the_elbo():
    _, history = train(epochs=2)
    assert history[-1][0] < history[0][0]


def test_samples_are_images():
    imgs = sample(VAE().cuda(), 5)
    assert imgs.shape == (5, 64)
    assert float(imgs.min()) >= 0.0 and float(imgs.max()) <= 1.0
