"""Train with a side stream that prefetches the next batch; time steps with CUDA events.

Usage: python train.py [--steps N]
"""

import argparse

import torch
import torch.nn.functional as F

from seqmodel import GRUClassifier, make_sequences


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--batch", type=int, default=16)
    args = parser.parse_args()

    torch.manual_seed(0)
    x_host, y_host = make_sequences()
    model = GRUClassifier().cuda()
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)

    copy_stream = torch.cuda.Stream()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)

    def fetch(i):
        lo = (i * args.batch) % x_host.shape[0]
        with torch.cuda.stream(copy_stream):
            xb = x_host[lo:lo + args.batch].cuda(non_blocking=True)
            yb = y_host[lo:lo + args.batch].cuda(non_blocking=True)
        return xb, yb

    nxt = fetch(0)
    times = []
    for step in range(args.steps):
        torch.cuda.current_stream().wait_stream(copy_stream)
        xb, yb = nxt
        nxt = fetch(step + 1)
        start.record()
        loss = F.cross_entropy(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
        print(f"step {step} loss {loss.item():.6f}")
    print(f"mean step time {sum(times) / len(times):.2f} ms")


if __name__ == "__main__":
    main()
