"""Train the classifier on the GPU; after a short warm-up the norms switch to the fused kernel.

Usage: python train.py [--steps N] [--batch B] [--lr LR]
"""

import argparse

import torch
import torch.nn.functional as F

from model import Classifier, make_data

WARMUP_STEPS = 2


def train(steps: int = 8, batch: int = 64, lr: float = 3e-3, seed: int = 0):
    """A fresh classifier trained ``steps`` AdamW steps; returns the model and the loss of every step."""
    torch.manual_seed(seed)
    x, y = make_data()
    x, y = x.cuda(), y.cuda()
    model = Classifier().cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    losses = []
    for step in range(steps):
        if step == WARMUP_STEPS:
            model.use_fused_kernels()
        start = (step * batch) % x.shape[0]
        loss = F.cross_entropy(model(x[start:start + batch]), y[start:start + batch])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        print(f"step {step} loss {losses[-1]:.6f}", flush=True)
    return model, losses


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lr", type=float, default=3e-3)
    args = parser.parse_args(argv)
    assert torch.cuda.is_available(), "needs a GPU"
    _, losses = train(args.steps, args.batch, args.lr)
    print(f"final loss {losses[-1]:.6f}")


if __name__ == "__main__":
    main()
