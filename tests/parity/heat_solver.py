"""The heat-equation solver the no-module parity tests run: a float64 step loop without an nn.Module,
printing its error beside fields that differ between runs by design (dtype, device), saving its field
and leaving ``u`` at top level, as scientific code is written."""

from __future__ import annotations

TEMPLATE = '''\
import os
import torch
dtype = torch.@DTYPE@
device = @DEVICE@
n, steps, alpha = 48, @STEPS@, @ALPHA@
x = torch.linspace(0, 1, n, dtype=dtype, device=device)
u = torch.sin(torch.pi * x)
h = float(x[1] - x[0])
dt = 0.25 * h * h / 0.1
t = 0.0
for k in range(steps):
    lap = torch.zeros_like(u)
    lap[1:-1] = (u[2:] - 2 * u[1:-1] + u[:-2]) / (h * h)
    u = u + dt * alpha * lap
    t += dt
    exact = torch.exp(torch.tensor(-0.1 * torch.pi ** 2 * t, dtype=dtype, device=device)) * torch.sin(torch.pi * x)
    print(f"t={t:.4f} max_err={(u - exact).abs().max().item():.3e} dtype={u.dtype} device=@SHOWN@")
@SAVE@
'''


def solver(*, dtype: str = "float64", alpha: float = 0.1, steps: int = 12, device: str = "None",
           shown_device: str = "{u.device}", save: str = 'torch.save({"u": u}, "u_final.pt")') -> str:
    """The solver's source: ``device`` is the Python expression its tensors are placed with (``None``: the
    default device), ``shown_device`` what it prints as its device, ``save`` its last statement."""
    return (TEMPLATE.replace("@DTYPE@", dtype).replace("@DEVICE@", device).replace("@STEPS@", str(steps))
            .replace("@ALPHA@", repr(alpha)).replace("@SHOWN@", shown_device).replace("@SAVE@", save))
