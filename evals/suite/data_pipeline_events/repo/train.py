"""Train the signal classifier on the GPU and report where each epoch's time goes.

Usage: python train.py [--epochs N] [--batch B] [--workers W]
"""

import argparse

import torch
import torch.nn.functional as F

from dataset import SignalDataset
from model import SignalNet
from pipeline import CudaTimer, make_loader, to_device


@torch.no_grad()
def evaluate(model, loader) -> float:
    model.eval()
    correct = total = 0
    for x, y in loader:
        x, y = to_device(x, y)
        correct += (model(x).argmax(dim=1) == y).sum().item()
        total += len(y)
    model.train()
    return correct / total


def train(epochs: int = 2, batch: int = 32, workers: int = 0, lr: float = 1e-2, seed: int = 0):
    torch.manual_seed(seed)
    model = SignalNet().cuda()
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    loader = make_loader(SignalDataset(seed=seed), batch, workers, seed=seed)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    stats = []
    for epoch in range(epochs):
        total_loss, compute_ms, samples = 0.0, 0.0, 0
        with CudaTimer() as epoch_timer:
            for x, y in loader:
                x, y = to_device(x, y)
                start.record()
                loss = F.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                end.record()
                torch.cuda.synchronize()
                compute_ms += start.elapsed_time(end)
                total_loss += loss.item() * len(y)
                samples += len(y)
        stats.append({"loss": total_loss / samples, "epoch_ms": epoch_timer.elapsed_ms,
                      "compute_ms": compute_ms, "samples": samples})
        rate = samples / max(epoch_timer.elapsed_ms, 1e-3) * 1000
        print(f"epoch {epoch} loss {stats[-1]['loss']:.4f} compute {compute_ms:.1f} ms "
              f"of {epoch_timer.elapsed_ms:.1f} ms ({rate:.0f} samples/s)")
    return model, stats


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--lr", type=float, default=1e-2)
    args = parser.parse_args(argv)
    model, _ = train(args.epochs, args.batch, args.workers, args.lr)
    val = make_loader(SignalDataset(n=192, seed=1), 64, shuffle=False)
    print(f"validation accuracy {evaluate(model, val):.3f}")


if __name__ == "__main__":
    main()
