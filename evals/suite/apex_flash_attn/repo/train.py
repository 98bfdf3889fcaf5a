"""Train the tiny LM (apex / flash-attn kernels when installed).

Usage: python train.py [--steps N] [--batch B]
"""

import argparse

import torch
import torch.nn.functional as F

from data import make_stream
from fast_layers import HAS_APEX, HAS_FLASH_ATTN, make_optimizer
from model import TinyLM


def get_batch(stream, batch: int, block: int = 32):
    ix = torch.randint(0, stream.numel() - block - 1, (batch,))
    x = torch.stack([stream[i:i + block] for i in ix])
    y = torch.stack([stream[i + 1:i + 1 + block] for i in ix])
    return x.cuda(non_blocking=True), y.cuda(non_blocking=True)


def train(steps: int = 40, batch: int = 16, lr: float = 3e-3, seed: int = 0):
    torch.manual_seed(seed)
    stream = make_stream(seed=seed)
    model = TinyLM().cuda()
    opt = make_optimizer(model.parameters(), lr=lr)
    print(f"apex: {HAS_APEX}, flash-attn: {HAS_FLASH_ATTN}")
    losses = []
    for step in range(steps):
        x, y = get_batch(stream, batch)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(x)
        loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), y.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if step % 10 == 0 or step == steps - 1:
            print(f"step {step} loss {losses[-1]:.4f}")
    return model, losses


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch", type=int, default=16)
    args = parser.parse_args()
    train(args.steps, args.batch)


if __name__ == "__main__":
    main()
