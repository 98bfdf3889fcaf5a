"""Simulate heat diffusion on the GPU in double precision and recover the diffusivity.

Usage: python simulate.py [--nx N] [--steps S] [--alpha A] [--t-end T]
"""

import argparse

import numpy as np
import torch

from fit import fit_decay_rate
from heat import crank_nicolson, exact_solution, grid, mode_amplitude

device = torch.device("cuda")


def initial_profile(nx: int) -> np.ndarray:
    """u(x, 0) = sin(pi x) + 0.5 sin(3 pi x) on the interior points (as a lab would load it: numpy)."""
    xs = np.linspace(0.0, 1.0, nx + 2)[1:-1]
    return np.sin(np.pi * xs) + 0.5 * np.sin(3 * np.pi * xs)


def run(nx: int = 64, steps: int = 100, alpha: float = 0.1, t_end: float = 0.5) -> dict:
    x = grid(nx, device)
    dx, dt = 1.0 / (nx + 1), t_end / steps
    u0 = torch.from_numpy(initial_profile(nx)).to(device)
    states = crank_nicolson(u0, alpha, dx, dt, steps)
    times = torch.arange(steps + 1, dtype=torch.float64, device=device) * dt
    amplitudes = mode_amplitude(states, x, dx)
    alpha_est, _ = fit_decay_rate(times, amplitudes)
    # error analysis on the host, in double precision
    exact = exact_solution(x.cpu().double(), t_end, alpha)
    max_error = (states[-1].cpu().double() - exact).abs().max().item()
    return {"x": x, "states": states, "times": times, "amplitudes": amplitudes,
            "alpha_est": alpha_est, "max_error": max_error}


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--nx", type=int, default=64)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--alpha", type=float, default=0.1)
    parser.add_argument("--t-end", type=float, default=0.5)
    args = parser.parse_args(argv)
    res = run(args.nx, args.steps, args.alpha, args.t_end)
    states = res["states"]
    for i in range(0, len(states), max(1, len(states) // 5)):
        print(f"t {res['times'][i].item():.3f} peak {states[i].abs().max().item():.6f}")
    print(f"max error vs exact solution {res['max_error']:.3e}")
    print(f"estimated alpha {res['alpha_est']:.6f} (true {args.alpha})")


if __name__ == "__main__":
    main()
