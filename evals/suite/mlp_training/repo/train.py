"""Train the MLP regressor on the GPU.

Usage: python train.py [--steps N] [--batch B] [--lr LR] [--save PATH]
"""

import argparse

import torch
import torch.nn.functional as F

from model import MLP, make_data

device = torch.device("cuda")


def check_gpu():
    if not torch.cuda.is_available():
        raise SystemExit("train.py needs a CUDA GPU (torch.cuda.is_available() is False)")
    print(f"found {torch.cuda.device_count()} GPU(s)")


def batches(n: int, batch: int, steps: int):
    """Start offsets of the mini-batches, made on the GPU (the data never leaves it)."""
    offsets = torch.arange(0, n, batch, device="cuda")
    for step in range(steps):
        yield step, int(offsets[step % len(offsets)])


def train(steps: int = 20, batch: int = 64, lr: float = 0.05, seed: int = 0):
    """Train a fresh MLP; returns the model and the loss of every step."""
    torch.manual_seed(seed)
    x, y = make_data()
    x = x.cuda()
    y = y.to(0)
    if x.is_cuda:
        torch.cuda.synchronize()

    model = MLP().cuda()
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    losses = []
    for step, start in batches(x.shape[0], batch, steps):
        xb = x[start:start + batch]
        yb = y[start:start + batch]
        loss = F.mse_loss(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        print(f"step {step} loss {losses[-1]:.6f}")
    return model, losses


@torch.no_grad()
def predict(model, x):
    """Predictions for host data, returned on the host."""
    return model(torch.as_tensor(x, device="cuda")).cpu()


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--save", default=None, help="where to write the trained weights")
    args = parser.parse_args(argv)

    check_gpu()
    model, losses = train(args.steps, args.batch, args.lr)
    print(f"final loss {losses[-1]:.6f}")
    if args.save:
        torch.save(model.state_dict(), args.save)
        print(f"saved {args.save}")
    return model, losses


if __name__ == "__main__":
    main()
