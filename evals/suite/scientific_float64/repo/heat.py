"""Crank-Nicolson solver for the 1-D heat equation u_t = alpha * u_xx on [0, 1], u = 0 at both ends.

Everything is double precision: the scheme is unconditionally stable, but round-off adds up over
many steps and the diffusivity fit below takes logarithms of small amplitudes.
"""

import math

import torch


def grid(nx: int, device) -> torch.Tensor:
    """The nx interior points of a uniform grid (the boundary values are fixed at 0)."""
    return torch.linspace(0.0, 1.0, nx + 2, dtype=torch.float64, device=device)[1:-1]


def exact_solution(x: torch.Tensor, t: float, alpha: float) -> torch.Tensor:
    """Solution for u(x, 0) = sin(pi x) + 0.5 sin(3 pi x)."""
    k1, k3 = math.exp(-alpha * math.pi**2 * t), math.exp(-9 * alpha * math.pi**2 * t)
    return k1 * torch.sin(math.pi * x) + 0.5 * k3 * torch.sin(3 * math.pi * x)


def laplacian(n: int, dx: float, device) -> torch.Tensor:
    """Second-difference matrix with Dirichlet boundaries."""
    main = torch.full((n,), -2.0, dtype=torch.float64, device=device)
    off = torch.ones(n - 1, dtype=torch.float64, device=device)
    return (torch.diag(main) + torch.diag(off, 1) + torch.diag(off, -1)) / dx**2


def crank_nicolson(u0: torch.Tensor, alpha: float, dx: float, dt: float, steps: int) -> torch.Tensor:
    """All states u(t_0..t_steps) as a (steps + 1, n) tensor on u0's device."""
    n = u0.shape[0]
    lap = laplacian(n, dx, u0.device)
    eye = torch.eye(n, dtype=torch.double, device=u0.device)
    lhs = eye - 0.5 * alpha * dt * lap
    rhs = eye + 0.5 * alpha * dt * lap
    lu, pivots = torch.linalg.lu_factor(lhs)
    states = [u0]
    u = u0
    for _ in range(steps):
        u = torch.linalg.lu_solve(lu, pivots, (rhs @ u).unsqueeze(1)).squeeze(1)
        states.append(u)
    return torch.stack(states)


def mode_amplitude(states: torch.Tensor, x: torch.Tensor, dx: float, k: int = 1) -> torch.Tensor:
    """Coefficient of sin(k pi x) in each state (discrete sine transform, one mode)."""
    return 2 * dx * (states * torch.sin(k * math.pi * x)).sum(dim=1)
