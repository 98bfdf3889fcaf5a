"""Train the tagger on the GPU.  Usage: python train.py [--steps N] [--batch B]"""

import argparse

import torch

from losses import BalancedTaggingLoss, tag_accuracy
from tagger import ConvTagger, make_batch


def train(steps: int = 40, batch: int = 32, length: int = 24, lr: float = 3e-3, seed: int = 0):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    model = ConvTagger().cuda()
    criterion = BalancedTaggingLoss(model.head[-1].out_features, tag_weights=[0.5, 1.0, 1.0, 1.0, 1.0])
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    for step in range(steps):
        tokens, tags = make_batch(batch, length, gen)
        tokens, tags = tokens.cuda(non_blocking=True), tags.cuda(non_blocking=True)
        logits = model(tokens)
        loss = criterion(logits, tags)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if step % 5 == 0 or step == steps - 1:
            print(f"step {step} loss {loss.item():.5f} acc {tag_accuracy(logits, tags):.3f}")
    return model, losses


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--lr", type=float, default=3e-3)
    args = parser.parse_args()
    train(steps=args.steps, batch=args.batch, lr=args.lr)


if __name__ == "__main__":
    main()
