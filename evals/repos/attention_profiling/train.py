"""Train a tiny language model from a DataLoader, optionally compiled and profiled.

Usage: python train.py [--steps N] [--compile] [--profile]
"""

import argparse

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile
from torch.utils.data import DataLoader, TensorDataset

from attn import TinyLM

try:
    from apex.optimizers import FusedAdam as Adam
except ImportError:
    from torch.optim import Adam


def make_loader(n: int = 256, seq: int = 16, vocab: int = 64, batch: int = 16):
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, vocab, (n, seq + 1), generator=g)
    ds = TensorDataset(tokens[:, :-1], tokens[:, 1:])
    return DataLoader(ds, batch_size=batch, shuffle=False, pin_memory=True, num_workers=0)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()

    torch.manual_seed(0)
    model = TinyLM().cuda()
    if args.compile:
        model = torch.compile(model, mode="max-autotune")
    opt = Adam(model.parameters(), lr=3e-3)

    prof = None
    if args.profile:
        prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
        prof.__enter__()
    step = 0
    for inputs, targets in make_loader():
        if step >= args.steps:
            break
        if args.profile:
            torch.cuda.nvtx.range_push(f"step{step}")
        inputs = inputs.cuda(non_blocking=True)
        targets = targets.cuda(non_blocking=True)
        logits = model(inputs)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if args.profile:
            torch.cuda.nvtx.range_pop()
        print(f"step {step} loss {loss.item():.6f}")
        step += 1
    if prof is not None:
        prof.__exit__(None, None, None)
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=5))


if __name__ == "__main__":
    main()
