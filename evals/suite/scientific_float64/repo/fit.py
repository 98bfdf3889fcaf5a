"""Recover the diffusivity from the decay of the first mode: log a(t) = -alpha pi^2 t + c."""

import math

import torch


def fit_decay_rate(times: torch.Tensor, amplitudes: torch.Tensor) -> tuple[float, float]:
    """Least-squares line through (t, log a); returns (alpha, log a(0))."""
    design = torch.stack([times, torch.ones_like(times)], dim=1)
    target = torch.log(amplitudes).unsqueeze(1)
    slope, intercept = torch.linalg.lstsq(design, target).solution.squeeze(1).tolist()
    return -slope / math.pi**2, intercept
