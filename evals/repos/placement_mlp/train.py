"""Train the MLP on the GPU.  Usage: python train.py [--steps N]"""

import argparse
import os
import tempfile

import torch
import torch.nn.functional as F

from model import MLP, make_data

device = torch.device("cuda")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()

    torch.manual_seed(0)
    x, y = make_data()
    x, y = x.cuda(), y.cuda()
    if x.is_cuda:
        torch.cuda.synchronize()

    model = MLP().cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    offsets = torch.arange(0, x.shape[0], args.batch, device="cuda")

    for step in range(args.steps):
        start = int(offsets[step % len(offsets)])
        xb = x[start:start + args.batch]
        yb = y[start:start + args.batch].to(0)
        loss = F.mse_loss(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step} loss {loss.item():.6f}")

    ckpt = os.path.join(tempfile.mkdtemp(), "mlp.pt")
    torch.save(model.state_dict(), ckpt)
    restored = MLP().cuda()
    restored.load_state_dict(torch.load(ckpt, map_location="cuda"))
    with torch.no_grad():
        diff = (restored(x[:8]) - model(x[:8])).abs().max().item()
    print(f"checkpoint roundtrip max diff {diff:.3g}")


if __name__ == "__main__":
    main()
