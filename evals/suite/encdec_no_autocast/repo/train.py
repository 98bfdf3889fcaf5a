"""Train the sequence-reversal transformer on one GPU, in float32.

Usage: python train.py [--steps N] [--batch B] [--lr LR]
"""

import argparse

import torch
import torch.nn.functional as F

from model import Seq2SeqTransformer, make_batch

device = torch.device("cuda")


def train(steps: int = 6, batch: int = 32, lr: float = 1e-3, seed: int = 0):
    """A fresh model trained ``steps`` optimizer steps; returns the model and the loss of every step."""
    torch.manual_seed(seed)
    torch.cuda.manual_seed(seed)
    model = Seq2SeqTransformer().to(device)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    data = torch.Generator().manual_seed(1234)
    losses = []
    model.train()
    for step in range(steps):
        src, tgt_in, tgt = (t.to(device, non_blocking=True) for t in make_batch(batch, generator=data))
        logits = model(src, tgt_in)
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), tgt.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        print(f"step {step} loss {losses[-1]:.6f}", flush=True)
    return model, losses


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1e-3)
    args = parser.parse_args(argv)
    print(f"training on {torch.cuda.get_device_name(0)}")
    _, losses = train(args.steps, args.batch, args.lr)
    print(f"final loss {losses[-1]:.6f}")


if __name__ == "__main__":
    main()
