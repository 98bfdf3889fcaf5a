"""Train the forecaster: python -m forecast.train [--epochs N] [--lr LR] [--cpu]"""

import argparse
import time

import torch as T
import torch.nn.functional as F

from .data import make_loaders
from .models import Forecaster
from .utils import device as devutil
from .utils.device import get_device, to_device


def evaluate(model, loader, device) -> float:
    model.eval()
    total, count = T.zeros((), device=device), 0
    with T.no_grad():
        for batch in loader:
            x, y = to_device(batch, device)
            total += F.l1_loss(model(x), y, reduction="sum")
            count += y.numel()
    model.train()
    return total.item() / count


def train(epochs: int = 3, lr: float = 0.05, device: T.device | None = None, seed: int = 0):
    device = device or get_device()
    T.manual_seed(seed)
    T.cuda.manual_seed_all(seed)
    train_loader, val_loader = make_loaders(seed=seed)
    model = Forecaster().to(device)
    opt = T.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    print(f"training on {device} ({devutil.describe(device)})")
    history = {"loss": [], "val_mae": []}
    for epoch in range(epochs):
        start = time.perf_counter()
        for batch in train_loader:
            x, y = to_device(batch, device)
            loss = F.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            history["loss"].append(loss.item())
        devutil.synchronize(device)
        history["val_mae"].append(evaluate(model, val_loader, device))
        print(f"epoch {epoch}: loss {history['loss'][-1]:.4f} val_mae {history['val_mae'][-1]:.4f} "
              f"({time.perf_counter() - start:.2f}s, peak {devutil.peak_memory_mb(device):.1f} MiB)")
    return model, history


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--cpu", action="store_true", help="train on the CPU even when a GPU is there")
    args = parser.parse_args(argv)
    train(args.epochs, args.lr, device=get_device(prefer_gpu=not args.cpu))


if __name__ == "__main__":
    main()
