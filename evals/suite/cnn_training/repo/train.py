"""Train the CNN on one GPU and report its memory use.

Usage: python train.py [--steps N] [--batch B] [--gpu I]
"""

import argparse

import torch
import torch.nn.functional as F

from gpu_utils import PeakMemory, describe_gpu, release_cached_memory
from net import SmallCNN, synthetic_images


def train(steps: int = 15, batch: int = 32, lr: float = 1e-2, gpu: int = 0):
    torch.manual_seed(0)
    images, labels = synthetic_images()
    with torch.cuda.device(gpu):
        model = SmallCNN().cuda()
        opt = torch.optim.Adam(model.parameters(), lr=lr)
        losses = []
        with PeakMemory() as mem:
            for step in range(steps):
                lo = (step * batch) % images.shape[0]
                xb = images[lo:lo + batch].cuda(non_blocking=True)
                yb = labels[lo:lo + batch].cuda(non_blocking=True)
                loss = F.cross_entropy(model(xb), yb)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                losses.append(loss.item())
                print(f"step {step} loss {losses[-1]:.6f}")
    return model, losses, mem.peak


@torch.no_grad()
def accuracy(model, images, labels, batch: int = 64) -> float:
    model.eval()
    correct = 0
    for lo in range(0, images.shape[0], batch):
        logits = model(images[lo:lo + batch].cuda())
        correct += (logits.argmax(1).cpu() == labels[lo:lo + batch]).sum().item()
    model.train()
    return correct / images.shape[0]


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=15)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--gpu", type=int, default=0)
    args = parser.parse_args(argv)

    info = describe_gpu(args.gpu)
    print(f"gpus={info['count']} using={info['index']} name={info['name']} "
          f"total_mem={info['total_memory']} free={info['free']}/{info['total']}")
    model, losses, peak = train(args.steps, args.batch, gpu=args.gpu)
    images, labels = synthetic_images(n=128, seed=1)
    print(f"held-out accuracy {accuracy(model, images, labels):.3f}")
    print(f"peak training memory {peak} bytes, {release_cached_memory()} bytes still allocated")


if __name__ == "__main__":
    main()
