"""Train the blob classifier on the GPU, checkpointing every epoch.

Usage: python train.py [--epochs N] [--ckpt-dir DIR] [--resume]

--resume continues from DIR/last.pt when it exists (same data order, optimizer and LR schedule
as an uninterrupted run). The best weights so far are kept in DIR/best.pt and evaluated at the end.
"""

import argparse
import os

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from checkpoint import load_checkpoint, load_for_inference, save_checkpoint
from data import make_blobs
from model import BlobNet


def make_loader(x, y, batch: int, seed: int, epoch: int) -> DataLoader:
    # one generator per epoch: a resumed run sees the same batches as an uninterrupted one
    g = torch.Generator().manual_seed(seed * 1000 + epoch)
    return DataLoader(TensorDataset(x, y), batch_size=batch, shuffle=True, generator=g)


@torch.no_grad()
def accuracy(model, x, y) -> float:
    was_training = model.training
    model.eval()
    pred = model(x.cuda()).argmax(dim=1)
    model.train(was_training)
    return (pred == y.cuda()).float().mean().item()


def build(lr: float, seed: int = 0):
    torch.manual_seed(seed)
    model = BlobNet().cuda()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    return model, optimizer, scheduler


def train(epochs: int = 3, ckpt_dir: str = "checkpoints", resume: bool = False,
          batch: int = 64, lr: float = 1e-2, seed: int = 0):
    model, optimizer, scheduler = build(lr, seed)
    x, y = make_blobs(512, seed=seed)
    xv, yv = make_blobs(256, seed=seed + 1)
    os.makedirs(ckpt_dir, exist_ok=True)
    last, best_path = os.path.join(ckpt_dir, "last.pt"), os.path.join(ckpt_dir, "best.pt")
    start, best, history = 0, 0.0, []
    if resume and os.path.exists(last):
        start, best, history = load_checkpoint(last, model, optimizer, scheduler)
        print(f"resumed from epoch {start} (best accuracy {best:.3f})")
    criterion = nn.CrossEntropyLoss()
    for epoch in range(start, epochs):
        total = 0.0
        for xb, yb in make_loader(x, y, batch, seed, epoch):
            xb, yb = xb.cuda(non_blocking=True), yb.cuda(non_blocking=True)
            loss = criterion(model(xb), yb)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item() * len(xb)
        scheduler.step()
        history.append(total / len(x))
        acc = accuracy(model, xv, yv)
        if acc > best:
            best = acc
            torch.save(model.state_dict(), best_path)
        save_checkpoint(last, model, optimizer, scheduler, epoch + 1, best, history)
        print(f"epoch {epoch} loss {history[-1]:.4f} val_acc {acc:.3f} lr {scheduler.get_last_lr()[0]:.4g}")
    return model, optimizer, history


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--ckpt-dir", default="checkpoints")
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lr", type=float, default=1e-2)
    args = parser.parse_args(argv)
    train(args.epochs, args.ckpt_dir, args.resume, args.batch, args.lr)
    best = load_for_inference(os.path.join(args.ckpt_dir, "best.pt"))
    xt, yt = make_blobs(256, seed=2)
    print(f"best model test accuracy {accuracy(best, xt, yt):.3f}")


if __name__ == "__main__":
    main()
