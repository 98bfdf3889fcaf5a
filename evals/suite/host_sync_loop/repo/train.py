"""Train the sensor classifier on the GPU, logging everything every step.

Usage: python train.py [--steps N] [--batch B] [--log-every K]
"""

import argparse

import numpy as np
import torch
import torch.nn as nn

from data import NUM_CLASSES, make_dataset
from model import build_model


def confusion_matrix(model, features, labels):
    model.eval()
    with torch.no_grad():
        preds = model(features.cuda()).argmax(dim=1).cpu().numpy()
    model.train()
    matrix = np.zeros((NUM_CLASSES, NUM_CLASSES), dtype=np.int64)
    np.add.at(matrix, (labels.numpy(), preds), 1)
    return matrix


def train(steps: int = 60, batch: int = 64, lr: float = 0.05, log_every: int = 10, seed: int = 0):
    torch.manual_seed(seed)
    features, labels = make_dataset(seed=seed)
    model = build_model().cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    criterion = nn.CrossEntropyLoss()
    history = {"loss": [], "acc": [], "grad_norm": []}
    running = 0.0

    for step in range(steps):
        idx = torch.randint(0, features.shape[0], (batch,))
        xb, yb = features[idx].cuda(), labels[idx].cuda()
        logits = model(xb)
        loss = criterion(logits, yb)
        optimizer.zero_grad()
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=5.0)
        optimizer.step()

        if torch.isnan(loss):
            raise RuntimeError(f"loss diverged at step {step}")
        running += loss.item()
        acc = (logits.argmax(dim=1) == yb).float().mean().cpu().numpy()
        history["loss"].append(float(loss))
        history["acc"].append(float(acc))
        history["grad_norm"].append(grad_norm.item())
        if step % log_every == 0 or step == steps - 1:
            print(f"step {step:3d} | loss {loss.item():.4f} | running {running / (step + 1):.4f} | acc {acc:.3f}")
            print("  grad norm:", grad_norm)

    matrix = confusion_matrix(model, features[:512], labels[:512])
    print("confusion matrix (rows: true class)")
    print(matrix)
    return model, history, matrix


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--log-every", type=int, default=10)
    args = parser.parse_args()
    train(steps=args.steps, batch=args.batch, lr=args.lr, log_every=args.log_every)


if __name__ == "__main__":
    main()
