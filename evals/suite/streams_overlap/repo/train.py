"""Train the two-tower classifier with a prefetching input pipeline.

Usage: python train.py [--epochs N] [--batch B]
"""

import argparse

import torch
import torch.nn.functional as F

from data import make_loader
from model import TwoTowerNet
from prefetch import CUDAPrefetcher


def train(epochs: int = 2, batch: int = 32, lr: float = 1e-2, seed: int = 0):
    torch.manual_seed(seed)
    model = TwoTowerNet().cuda()
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    loader = make_loader(batch=batch, seed=seed)
    history = []
    for epoch in range(epochs):
        prefetcher = CUDAPrefetcher(loader)
        x, y = prefetcher.next()
        total, correct, seen = 0.0, 0, 0
        while x is not None:
            logits = model(x)
            loss = F.cross_entropy(logits, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item() * len(y)
            correct += (logits.argmax(dim=1) == y).sum().item()
            seen += len(y)
            x, y = prefetcher.next()
        torch.cuda.synchronize()
        history.append((total / seen, correct / seen))
        print(f"epoch {epoch} loss {history[-1][0]:.4f} accuracy {history[-1][1]:.3f}")
    return model, history


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1e-2)
    args = parser.parse_args(argv)
    train(args.epochs, args.batch, args.lr)


if __name__ == "__main__":
    main()
