"""Train the denoising autoencoder on the GPU (noise drawn on the device, dropout on).

Usage: python train.py [--steps N] [--batch B] [--noise S] [--seed S]
"""

import argparse

import torch
import torch.nn.functional as F

from model import DenoisingAE, make_signals


def seed_everything(seed: int):
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)


def train(steps: int = 6, batch: int = 32, noise: float = 0.3, lr: float = 3e-3, seed: int = 0):
    """A fresh autoencoder, initialised on the GPU, trained ``steps`` Adam steps; returns it and the losses."""
    seed_everything(seed)
    device = torch.device("cuda", 0)
    data = make_signals().to(device)
    model = DenoisingAE(device=device)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    model.train()
    for step in range(steps):
        start = (step * batch) % data.shape[0]
        clean = data[start:start + batch]
        noisy = clean + noise * torch.randn(clean.shape, device=device)
        loss = F.mse_loss(model(noisy), clean)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        print(f"step {step} loss {losses[-1]:.6f}", flush=True)
    return model, losses


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--noise", type=float, default=0.3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    _, losses = train(args.steps, args.batch, args.noise, seed=args.seed)
    print(f"final loss {losses[-1]:.6f} (memory {torch.cuda.max_memory_allocated() / 2**20:.1f} MiB)")


if __name__ == "__main__":
    main()
