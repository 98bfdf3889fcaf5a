"""Train the tiny GPT with mixed precision (fp16 autocast + GradScaler) on one GPU.

Usage: python train.py [--steps N] [--batch B] [--no-amp] [--sample N]
"""

import argparse

import torch

from data import CharTokenizer, get_batch, make_corpus
from model import GPT, GPTConfig

device = torch.device("cuda")


def amp_context(enabled: bool = True):
    return torch.cuda.amp.autocast(enabled=enabled, dtype=torch.float16)


def train(steps: int = 30, batch: int = 8, lr: float = 1e-2, amp: bool = True, seed: int = 1337):
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)
    text = make_corpus()
    tok = CharTokenizer(text)
    data = tok.encode(text)
    cfg = GPTConfig(vocab_size=tok.vocab_size)
    model = GPT(cfg).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    scaler = torch.cuda.amp.GradScaler(enabled=amp)
    gen = torch.Generator().manual_seed(seed)

    losses = []
    for step in range(steps):
        xb, yb = get_batch(data, cfg.block_size, batch, gen)
        xb, yb = xb.cuda(non_blocking=True), yb.cuda(non_blocking=True)
        with amp_context(amp):
            _, loss = model(xb, yb)
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        losses.append(loss.item())
        print(f"step {step} loss {losses[-1]:.4f} scale {scaler.get_scale():.0f}")
    return model, tok, losses


def sample(model, tok, prompt: str = "the ", n: int = 40) -> str:
    idx = tok.encode(prompt).unsqueeze(0).cuda()
    with amp_context():
        out = model.generate(idx, n)
    return tok.decode(out[0].tolist())


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--no-amp", action="store_true")
    parser.add_argument("--sample", type=int, default=40, help="characters to sample after training")
    args = parser.parse_args(argv)

    model, tok, losses = train(args.steps, args.batch, args.lr, amp=not args.no_amp)
    print(f"final loss {losses[-1]:.4f}")
    if args.sample:
        print("sample:", repr(sample(model, tok, n=args.sample)))


if __name__ == "__main__":
    main()
