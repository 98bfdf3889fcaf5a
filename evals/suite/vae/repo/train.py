"""Train the VAE on the GPU, then sample from the prior.

Usage: python train.py [--epochs N] [--batch B] [--samples K]
"""

import argparse

import torch
from torch.utils.data import DataLoader, TensorDataset

from data import make_images
from vae import VAE, vae_loss

device = torch.device("cuda:0")


def train(epochs: int = 3, batch: int = 64, lr: float = 3e-3, seed: int = 0, n_images: int = 512):
    torch.manual_seed(seed)
    torch.cuda.manual_seed(seed)
    loader = DataLoader(TensorDataset(make_images(n_images)), batch_size=batch, shuffle=True,
                        generator=torch.Generator().manual_seed(seed))
    model = VAE().to(device)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    history = []
    for epoch in range(epochs):
        for (x,) in loader:
            x = x.cuda(non_blocking=True)
            logits, mu, logvar = model(x)
            loss, recon, kl = vae_loss(logits, x, mu, logvar)
            opt.zero_grad()
            loss.backward()
            opt.step()
            history.append((loss.item(), recon.item(), kl.item()))
        loss, recon, kl = history[-1]
        print(f"epoch {epoch} loss {loss:.3f} recon {recon:.3f} kl {kl:.3f}")
    return model, history


@torch.no_grad()
def sample(model, n: int = 16, seed: int = 123) -> torch.Tensor:
    """Decode n draws from the prior (own generator, so training's RNG is untouched); on the host."""
    state = torch.cuda.get_rng_state()
    g = torch.Generator(device="cuda").manual_seed(seed)
    z = torch.randn(n, model.latent, generator=g, device="cuda:0")
    imgs = torch.sigmoid(model.decode(z))
    torch.cuda.set_rng_state(state)
    return imgs.cpu()


@torch.no_grad()
def reconstruction_error(model, x) -> float:
    """Mean absolute pixel error of the posterior-mean reconstruction."""
    model.eval()
    mu, _ = model.encode(x.to(device))
    err = (torch.sigmoid(model.decode(mu)) - x.to(device)).abs().mean().item()
    model.train()
    return err


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--samples", type=int, default=16)
    args = parser.parse_args(argv)
    model, _ = train(args.epochs, args.batch, args.lr)
    print(f"reconstruction error {reconstruction_error(model, make_images(128, seed=1)):.4f}")
    imgs = sample(model, args.samples)
    print(f"{len(imgs)} samples, mean pixel {imgs.mean().item():.4f}")


if __name__ == "__main__":
    main()
