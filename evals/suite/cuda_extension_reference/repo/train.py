"""Train the regressor with the fused MLP blocks on the GPU.

Usage: python train.py [--steps N] [--batch B]
"""

import argparse

import torch
import torch.nn.functional as F

from fused_ops import extension_loaded
from model import Regressor


def make_data(n: int = 1024, n_in: int = 12, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, n_in, generator=g)
    y = torch.sin(x[:, :4].sum(dim=1)) + 0.5 * x[:, 4] * x[:, 5] + 0.05 * torch.randn(n, generator=g)
    return x, y


def train(steps: int = 40, batch: int = 128, lr: float = 2e-3, seed: int = 0):
    torch.manual_seed(seed)
    x, y = make_data(seed=seed)
    x, y = x.cuda(), y.cuda()
    model = Regressor().cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    print(f"fused bias_gelu kernel: {'on' if extension_loaded() else 'off (PyTorch reference)'}")
    losses = []
    for step in range(steps):
        idx = torch.randint(0, x.shape[0], (batch,), device="cuda")
        loss = F.mse_loss(model(x[idx]), y[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if step % 10 == 0 or step == steps - 1:
            print(f"step {step} loss {loss.item():.5f}")
    return model, losses


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch", type=int, default=128)
    args = parser.parse_args()
    train(steps=args.steps, batch=args.batch)


if __name__ == "__main__":
    main()
