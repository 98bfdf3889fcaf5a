"""Train the texture classifier on the GPU with the usual speed flags.

Usage: python train.py [--steps N] [--deterministic]
"""

import argparse
import random

import numpy as np
import torch
import torch.backends.cudnn as cudnn
import torch.nn.functional as F

from data import make_images
from model import TextureNet

# Ampere and newer: TF32 for matmuls and convolutions (~10x faster, ~1e-3 relative error)
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
# let cuDNN pick the fastest conv algorithms for our fixed input size
cudnn.benchmark = True

device = torch.device("cuda")


def set_seed(seed: int, deterministic: bool = False) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)
    if deterministic:
        cudnn.deterministic = True
        cudnn.benchmark = False


def train(steps: int = 60, batch: int = 32, lr: float = 0.01, seed: int = 0, deterministic: bool = False):
    set_seed(seed, deterministic)
    images, labels = make_images(seed=seed)
    images, labels = images.to(device), labels.to(device)
    model = TextureNet().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    order = torch.randperm(images.shape[0], device=device)
    losses = []
    for step in range(steps):
        idx = order[(step * batch) % 480:(step * batch) % 480 + batch]
        loss = F.cross_entropy(model(images[idx]), labels[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if step % 20 == 0 or step == steps - 1:
            print(f"step {step} loss {losses[-1]:.4f}")
    model.eval()
    with torch.no_grad():
        acc = (model(images[480:]).argmax(1) == labels[480:]).float().mean().item()
    print(f"held-out accuracy {acc:.3f}")
    return model, losses, acc


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--deterministic", action="store_true", help="reproducible cuDNN kernels (slower)")
    args = parser.parse_args()
    if cudnn.is_available():
        print(f"cuDNN {cudnn.version()}, benchmark={cudnn.benchmark}")
    train(args.steps, deterministic=args.deterministic)


if __name__ == "__main__":
    main()
