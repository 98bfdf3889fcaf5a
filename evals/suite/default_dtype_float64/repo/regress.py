"""Fit a GP to noisy samples on the GPU and report the fit.

Usage: python regress.py [--steps N] [--n POINTS] [--lr LR]
"""

import argparse

import torch

from data import make_data, target
from gp import ExactGP


def fit(steps: int = 60, n: int = 40, lr: float = 0.05, seed: int = 0):
    x, y = make_data(n, seed=seed)
    model = ExactGP(x, y).cuda()
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    history = []
    for step in range(steps):
        opt.zero_grad()
        loss = model.neg_log_marginal_likelihood()
        loss.backward()
        opt.step()
        history.append(loss.item())
        if step % 20 == 0 or step == steps - 1:
            print(f"step {step} nll {loss.item():.5f}")
    return model, history


def prediction_grid(m: int = 100) -> torch.Tensor:
    return torch.linspace(0, 6.28, m, device="cuda").unsqueeze(1)


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--n", type=int, default=40)
    parser.add_argument("--lr", type=float, default=0.05)
    args = parser.parse_args(argv)
    model, _ = fit(args.steps, args.n, args.lr)
    hp = model.hyperparameters()
    print("hyperparameters " + " ".join(f"{k} {v:.4f}" for k, v in hp.items()))
    xs = prediction_grid()
    mean, var = model.predict(xs)
    rmse = (mean - target(xs.squeeze(1))).pow(2).mean().sqrt().item()
    print(f"test rmse {rmse:.4f} mean std {var.sqrt().mean().item():.4f}")


if __name__ == "__main__":
    main()
