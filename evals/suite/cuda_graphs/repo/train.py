"""Train a regressor; the whole step (forward, backward, optimizer) is captured once in a CUDA
graph and replayed per batch, which removes the launch overhead of this small model.

Usage: python train.py [--steps N] [--batch B] [--graphs | --no-graphs]
"""

import argparse

import torch
import torch.nn.functional as F

from data import make_data
from model import make_model


def capture_step(model, opt, static_x, static_y, warmup: int = 3):
    """Warm up on a side stream, then capture one full training step (as the PyTorch docs show)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(warmup):
            opt.zero_grad(set_to_none=True)
            F.mse_loss(model(static_x), static_y).backward()
            opt.step()
    torch.cuda.current_stream().wait_stream(s)

    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        static_loss = F.mse_loss(model(static_x), static_y)
        static_loss.backward()
        opt.step()
    return graph, static_loss


def train(steps: int = 60, batch: int = 128, lr: float = 0.05, graphs: bool = True, seed: int = 0):
    torch.manual_seed(seed)
    x, y = make_data(seed=seed)
    x, y = x.cuda(), y.cuda()
    model = make_model().cuda()
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    batches = torch.randint(0, x.shape[0], (steps, batch), device="cuda")
    losses = []
    if graphs:
        static_x = torch.zeros(batch, x.shape[1], device="cuda")
        static_y = torch.zeros(batch, 1, device="cuda")
        static_x.copy_(x[batches[0]])
        static_y.copy_(y[batches[0]])
        graph, static_loss = capture_step(model, opt, static_x, static_y)
        for idx in batches:
            static_x.copy_(x[idx])
            static_y.copy_(y[idx])
            graph.replay()
            losses.append(static_loss.item())
    else:
        for idx in batches:
            loss = F.mse_loss(model(x[idx]), y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(loss.item())
    torch.cuda.synchronize()
    for step in range(0, steps, 20):
        print(f"step {step} loss {losses[step]:.4f}")
    print(f"final loss {losses[-1]:.4f} ({'graph replay' if graphs else 'eager'})")
    return model, losses


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--graphs", action=argparse.BooleanOptionalAction, default=True,
                        help="capture the training step in a CUDA graph (default: on)")
    args = parser.parse_args()
    train(args.steps, args.batch, graphs=args.graphs)


if __name__ == "__main__":
    main()
