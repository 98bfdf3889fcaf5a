"""Fit the features on the CPU, train a logistic model on the GPU, check it the way serving runs it.

Usage: python train.py [--epochs N] [--lr LR]
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

from data import make_table
from features import Featurizer


def build(seed: int = 0):
    torch.manual_seed(seed)
    numeric, category, label = make_table(seed=seed)
    featurizer = Featurizer().fit(numeric[:1600])
    model = nn.Sequential(nn.Linear(featurizer.n_features, 16), nn.Tanh(), nn.Linear(16, 2))
    return featurizer, model, (numeric, category, label)


def train(epochs: int = 30, lr: float = 0.3, seed: int = 0):
    featurizer, model, (numeric, category, label) = build(seed)
    featurizer, model = featurizer.cuda(), model.cuda()
    x = featurizer(numeric[:1600].cuda(), category[:1600].cuda())
    y = label[:1600].cuda()
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    losses = []
    for epoch in range(epochs):
        for i in range(0, x.shape[0], 200):
            loss = F.cross_entropy(model(x[i:i + 200]), y[i:i + 200])
            opt.zero_grad()
            loss.backward()
            opt.step()
        losses.append(loss.item())
        if epoch % 10 == 0 or epoch == epochs - 1:
            print(f"epoch {epoch} loss {losses[-1]:.4f}")
    return featurizer, model, losses


def serve(featurizer, model, numeric, category):
    """What the CPU service does with a trained model: features, logits, labels."""
    featurizer, model = featurizer.cpu(), model.cpu()
    with torch.no_grad():
        return model(featurizer(numeric, category)).argmax(dim=1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--lr", type=float, default=0.3)
    args = parser.parse_args()
    featurizer, model, _ = train(args.epochs, args.lr)
    numeric, category, label = make_table(seed=0)
    with torch.no_grad():
        gpu_pred = model(featurizer(numeric[1600:].cuda(), category[1600:].cuda())).argmax(dim=1).cpu()
    cpu_pred = serve(featurizer, model, numeric[1600:], category[1600:])
    print(f"holdout accuracy {(cpu_pred == label[1600:]).float().mean():.3f}, "
          f"train/serve label agreement {(gpu_pred == cpu_pred).float().mean():.3f}")


if __name__ == "__main__":
    main()
