"""What the migrated heat solver must do on the accelerator: same physics, float32 accuracy."""

import math
import os
import subprocess
import sys

import torch

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def accelerator() -> torch.device:
    return torch.accelerator.current_accelerator() or torch.device("cpu")


def reference_states(nx: int, steps: int, alpha: float, t_end: float) -> torch.Tensor:
    """Crank-Nicolson in float64 on the CPU, written independently of the repository."""
    dx, dt = 1.0 / (nx + 1), t_end / steps
    x = torch.linspace(0.0, 1.0, nx + 2, dtype=torch.float64)[1:-1]
    u = torch.sin(math.pi * x) + 0.5 * torch.sin(3 * math.pi * x)
    lap = (torch.diag(torch.full((nx,), -2.0, dtype=torch.float64))
           + torch.diag(torch.ones(nx - 1, dtype=torch.float64), 1)
           + torch.diag(torch.ones(nx - 1, dtype=torch.float64), -1)) / dx**2
    eye = torch.eye(nx, dtype=torch.float64)
    lhs, rhs = eye - 0.5 * alpha * dt * lap, eye + 0.5 * alpha * dt * lap
    states = [u]
    for _ in range(steps):
        u = torch.linalg.solve(lhs, rhs @ u)
        states.append(u)
    return torch.stack(states)


def reference_alpha(states: torch.Tensor, steps: int, t_end: float) -> float:
    nx = states.shape[1]
    dx = 1.0 / (nx + 1)
    x = torch.linspace(0.0, 1.0, nx + 2, dtype=torch.float64)[1:-1]
    amp = 2 * dx * (states * torch.sin(math.pi * x)).sum(dim=1)
    t = torch.arange(steps + 1, dtype=torch.float64) * (t_end / steps)
    design = torch.stack([t, torch.ones_like(t)], dim=1)
    sol = torch.linalg.lstsq(design, torch.log(amp).unsqueeze(1)).solution
    return -sol[0, 0].item() / math.pi**2


def test_simulates_on_the_accelerator_to_float32_accuracy():
    import simulate

    res = simulate.run(nx=64, steps=100, alpha=0.1, t_end=0.5)
    states = res["states"]
    assert states.device.type == accelerator().type and res["x"].device.type == accelerator().type
    assert states.shape == (101, 64) and states.is_floating_point()
    ref = reference_states(64, 100, 0.1, 0.5)
    err = (states.cpu().double() - ref).abs().max().item()
    assert err < 5e-5, err  # float32 round-off over 100 steps (~6e-6); bf16 would be ~1e-3


def test_recovers_the_diffusivity_on_the_accelerator():
    import simulate

    res = simulate.run(nx=64, steps=100, alpha=0.1, t_end=0.5)
    assert res["amplitudes"].device.type == accelerator().type
    ref = reference_alpha(reference_states(64, 100, 0.1, 0.5), 100, 0.5)
    assert abs(res["alpha_est"] - ref) / ref < 2e-4, (res["alpha_est"], ref)
    assert abs(res["alpha_est"] - 0.1) < 1e-4
    assert res["max_error"] < 2e-4  # discretisation error of the scheme (7e-5 in float64)


def test_another_diffusivity_and_grid():
    import simulate

    res = simulate.run(nx=40, steps=60, alpha=0.05, t_end=0.8)
    ref = reference_states(40, 60, 0.05, 0.8)
    assert (res["states"].cpu().double() - ref).abs().max().item() < 5e-5
    assert abs(res["alpha_est"] - 0.05) < 1e-4


def test_script_runs():
    proc = subprocess.run(
        [sys.executable, "simulate.py", "--steps", "50"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "max error vs exact solution" in proc.stdout
    line = next(l for l in proc.stdout.splitlines() if l.startswith("estimated alpha"))
    assert abs(float(line.split()[2]) - 0.1) < 1e-3, line


def test_exact_solution_starts_from_the_initial_profile():
    import simulate
    from heat import exact_solution

    x = torch.linspace(0.0, 1.0, 34, dtype=torch.float64)[1:-1]
    torch.testing.assert_close(exact_solution(x, 0.0, 0.1),
                               torch.from_numpy(simulate.initial_profile(32)))
    assert exact_solution(x, 1.0, 0.1).abs().max() < 0.4
