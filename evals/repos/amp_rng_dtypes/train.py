"""Mixed-precision training with a GradScaler and a float64 error metric.

Usage: python train.py [--steps N]
"""

import argparse

import torch
from torch import nn

from data import make_regression

torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
torch.backends.cudnn.benchmark = True


def build_model(n_features: int) -> nn.Module:
    return nn.Sequential(nn.Linear(n_features, 48), nn.GELU(), nn.Linear(48, 1))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=15)
    args = parser.parse_args()

    torch.manual_seed(0)
    torch.cuda.manual_seed_all(0)
    features, targets = make_regression()
    x = torch.from_numpy(features).cuda()
    y = torch.from_numpy(targets).cuda()

    model = build_model(x.shape[1]).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    scaler = torch.cuda.amp.GradScaler()
    rng_state = torch.cuda.get_rng_state()

    for step in range(args.steps):
        idx = torch.arange(step * 32, step * 32 + 32, device="cuda") % x.shape[0]
        with torch.cuda.amp.autocast(dtype=torch.bfloat16):
            pred = model(x[idx]).squeeze(-1)
            loss = (pred.float() - y[idx].float()).pow(2).mean()
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        # Accumulate the error metric in double precision.
        abs_err = (pred.double() - y[idx]).abs().mean()
        print(f"step {step} loss {loss.item():.6f} mae {abs_err.item():.6f}")

    torch.cuda.set_rng_state(rng_state)


if __name__ == "__main__":
    main()
