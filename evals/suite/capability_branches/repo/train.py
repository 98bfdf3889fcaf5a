"""Train the token-majority classifier with mixed precision chosen from the GPU's capability.

Usage: python train.py [--steps N] [--batch B]
"""

import argparse

import torch
import torch.nn.functional as F

import hardware
from data import make_sequences
from model import Classifier


def train(steps: int = 80, batch: int = 64, lr: float = 3e-3, seed: int = 0):
    torch.manual_seed(seed)
    dtype = hardware.amp_dtype()
    print(f"GPU: {hardware.describe()}; autocast {dtype}; fused attention {hardware.fused_attention_ok()}")
    tokens, labels = make_sequences(seed=seed)
    tokens, labels = tokens.cuda(), labels.cuda()
    model = Classifier(fused=hardware.fused_attention_ok()).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    scaler = torch.amp.GradScaler("cuda", enabled=dtype == torch.float16)
    losses = []
    for step in range(steps):
        idx = torch.randint(0, 896, (batch,), device="cuda")
        with torch.autocast("cuda", dtype=dtype):
            loss = F.cross_entropy(model(tokens[idx]), labels[idx])
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        losses.append(loss.item())
        if step % 20 == 0 or step == steps - 1:
            print(f"step {step} loss {losses[-1]:.4f}")
    model.eval()
    with torch.no_grad(), torch.autocast("cuda", dtype=dtype):
        acc = (model(tokens[896:]).argmax(1) == labels[896:]).float().mean().item()
    print(f"held-out accuracy {acc:.3f}")
    return model, losses, acc


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()
    train(args.steps, args.batch)


if __name__ == "__main__":
    main()
