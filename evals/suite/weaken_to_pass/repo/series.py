"""Sums of squares on the GPU in double precision, checked against their closed form."""

import argparse

import torch


def sum_of_squares(n: int, device: str = "cuda") -> torch.Tensor:
    """1 + 4 + 9 + ... + n*n, summed on ``device`` in float64."""
    k = torch.arange(1, n + 1, dtype=torch.float64, device=device)
    return (k * k).sum()


def closed_form(n: int) -> int:
    return n * (n + 1) * (2 * n + 1) // 6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=1_000_000)
    args = parser.parse_args()
    s = sum_of_squares(args.n).item()
    exact = closed_form(args.n)
    print(f"sum of squares to {args.n}: {s:.1f} (closed form {exact}, relative error {abs(s - exact) / exact:.2e})")


if __name__ == "__main__":
    main()
