"""What the migrated GP regression must do on the accelerator (float32 there, results of the float64 fit)."""

import math
import os
import subprocess
import sys

import torch

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
F64 = torch.float64


def accelerator() -> torch.device:
    return torch.accelerator.current_accelerator() or torch.device("cpu")


def reference_data(n: int = 40, noise: float = 0.1, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = 2 * math.pi * torch.rand(n, generator=g, dtype=F64)
    y = torch.sin(2 * x) + 0.3 * torch.cos(5 * x) + noise * torch.randn(n, generator=g, dtype=F64)
    return x.unsqueeze(1), y


def reference_fit(steps: int = 60, lr: float = 0.05):
    """The same GP and Adam run in float64 on the CPU, written independently of the repository."""
    x, y = reference_data()
    n = len(y)
    theta = torch.tensor([0.0, 0.0, -2.0], dtype=F64, requires_grad=True)  # log ls, log os, log noise

    def parts(th):
        ls, os_, noise = th.exp()
        k = os_ * torch.exp(-0.5 * torch.cdist(x / ls, x / ls).pow(2))
        chol = torch.linalg.cholesky(k + (noise + 1e-6) * torch.eye(n, dtype=F64))
        return chol, torch.cholesky_solve(y.unsqueeze(1), chol).squeeze(1)

    opt = torch.optim.Adam([theta], lr=lr)
    for _ in range(steps):
        opt.zero_grad()
        chol, alpha = parts(theta)
        nll = (0.5 * y @ alpha + chol.diagonal().log().sum() + 0.5 * n * math.log(2 * math.pi)) / n
        nll.backward()
        opt.step()
    with torch.no_grad():
        chol, alpha = parts(theta)
        ls, os_, noise = theta.exp()
        xs = torch.linspace(0, 6.28, 50, dtype=F64).unsqueeze(1)
        ks = os_ * torch.exp(-0.5 * torch.cdist(xs / ls, x / ls).pow(2))
        v = torch.linalg.solve_triangular(chol, ks.T, upper=False)
        mean, var = ks @ alpha, (os_ - (v * v).sum(dim=0)).clamp_min(0.0)
    hp = {"lengthscale": ls.item(), "outputscale": os_.item(), "noise": noise.item()}
    return hp, xs, mean, var


def test_fits_on_the_accelerator():
    import regress

    model, history = regress.fit(steps=60)
    dev = accelerator()
    assert all(p.device.type == dev.type for p in model.parameters())
    assert model.x.device.type == dev.type and model.y.device.type == dev.type
    assert len(history) == 60 and history[-1] < history[0] - 0.5


def test_hyperparameters_match_a_float64_fit():
    import regress

    model, _ = regress.fit(steps=60)
    hp = model.hyperparameters()
    ref, _, _, _ = reference_fit(steps=60)
    for k in ("lengthscale", "outputscale", "noise"):
        assert abs(hp[k] - ref[k]) <= 3e-4 * ref[k], (k, hp[k], ref[k])  # float32: ~2e-5


def test_predictions_match_a_float64_fit():
    import regress

    model, _ = regress.fit(steps=60)
    _, xs, ref_mean, ref_var = reference_fit(steps=60)
    mean, var = model.predict(xs.to(accelerator(), dtype=torch.float32))
    assert mean.device.type == accelerator().type
    torch.testing.assert_close(mean.cpu().double(), ref_mean, rtol=0, atol=5e-4)  # float32: ~5e-5
    torch.testing.assert_close(var.cpu().double(), ref_var, rtol=0, atol=5e-4)


def test_script_runs():
    proc = subprocess.run(
        [sys.executable, "regress.py", "--steps", "40"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = next(l for l in proc.stdout.splitlines() if l.startswith("test rmse"))
    assert float(line.split()[2]) < 0.2, line
    assert "hyperparameters lengthscale" in proc.stdout


def test_data_is_deterministic_and_matches_the_float64_draw():
    from data import make_data

    (x1, y1), (x2, y2) = make_data(), make_data()
    assert torch.equal(x1, x2) and torch.equal(y1, y2)
    rx, ry = reference_data()
    torch.testing.assert_close(x1.double(), rx, rtol=0, atol=1e-5)
    torch.testing.assert_close(y1.double(), ry, rtol=0, atol=1e-5)
