import math

import torch

from fit import fit_decay_rate
from heat import crank_nicolson, exact_solution, grid, laplacian
from simulate import run


def test_laplacian_of_a_sine_on_the_gpu():
    nx = 63
    x = grid(nx, "cuda")
    lap = laplacian(nx, 1.0 / (nx + 1), "cuda")
    u = torch.sin(math.pi * x)
    torch.testing.assert_close(lap @ u, -(math.pi**2) * u, rtol=0, atol=5e-3)  # O(dx^2) error ~2e-3


def test_solver_tracks_the_exact_solution():
    res = run(nx=48, steps=80)
    assert res["max_error"] < 1e-3


def test_energy_decays_monotonically():
    x = grid(32, "cuda")
    states = crank_nicolson(exact_solution(x, 0.0, 0.1), 0.1, 1 / 33, 0.01, 20)
    energy = (states**2).sum(dim=1)
    assert (energy[1:] < energy[:-1]).all()


def test_fit_recovers_a_known_rate():
    t = torch.linspace(0, 1, 11, dtype=torch.float64, device="cuda")
    alpha, c = fit_decay_rate(t, 3.0 * torch.exp(-0.25 * math.pi**2 * t))
    assert abs(alpha - 0.25) < 1e-6 and abs(c - math.log(3.0)) < 1e-6
