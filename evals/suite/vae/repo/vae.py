"""A small fully connected VAE for 8x8 images with pixels in [0, 1]."""

import torch
import torch.nn.functional as F
from torch import nn


class VAE(nn.Module):
    def __init__(self, n_pixels: int = 64, hidden: int = 48, latent: int = 4):
        super().__init__()
        self.latent = latent
        self.enc = nn.Sequential(nn.Linear(n_pixels, hidden), nn.ReLU())
        self.mu = nn.Linear(hidden, latent)
        self.logvar = nn.Linear(hidden, latent)
        self.dec = nn.Sequential(nn.Linear(latent, hidden), nn.ReLU(), nn.Linear(hidden, n_pixels))

    def encode(self, x):
        h = self.enc(x)
        return self.mu(h), self.logvar(h)

    def reparameterize(self, mu, logvar):
        std = torch.exp(0.5 * logvar)
        eps = torch.randn_like(std)
        return mu + eps * std

    def decode(self, z):
        return self.dec(z)  # logits

    def forward(self, x):
        mu, logvar = self.encode(x)
        z = self.reparameterize(mu, logvar)
        return self.decode(z), mu, logvar


def vae_loss(logits, x, mu, logvar):
    """Negative ELBO per example: Bernoulli reconstruction + KL(q(z|x) || N(0, I))."""
    recon = F.binary_cross_entropy_with_logits(logits, x, reduction="sum") / x.shape[0]
    kl = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp()) / x.shape[0]
    return recon + kl, recon, kl
