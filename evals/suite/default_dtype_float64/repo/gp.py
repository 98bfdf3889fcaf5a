"""Exact Gaussian-process regression with an RBF kernel, hyperparameters by marginal likelihood."""

import math

import torch
from torch import nn

# Kernel matrices are badly conditioned: do everything in double precision (as GPyTorch advises).
torch.set_default_dtype(torch.float64)

JITTER = 1e-6


class RBFKernel(nn.Module):
    def __init__(self):
        super().__init__()
        self.log_lengthscale = nn.Parameter(torch.tensor(0.0))
        self.log_outputscale = nn.Parameter(torch.tensor(0.0))

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        ls = self.log_lengthscale.exp()
        d2 = torch.cdist(a / ls, b / ls).pow(2)
        return self.log_outputscale.exp() * torch.exp(-0.5 * d2)


class ExactGP(nn.Module):
    def __init__(self, x: torch.Tensor, y: torch.Tensor):
        super().__init__()
        self.register_buffer("x", x)
        self.register_buffer("y", y)
        self.kernel = RBFKernel()
        self.log_noise = nn.Parameter(torch.tensor(-2.0))

    def _cholesky(self) -> torch.Tensor:
        n = self.x.shape[0]
        noise = self.log_noise.exp() + JITTER
        k = self.kernel(self.x, self.x) + noise * torch.eye(n, device=self.x.device)
        return torch.linalg.cholesky(k)

    def neg_log_marginal_likelihood(self) -> torch.Tensor:
        """-log p(y | X, theta) / n."""
        n = self.y.shape[0]
        chol = self._cholesky()
        alpha = torch.cholesky_solve(self.y.unsqueeze(1), chol).squeeze(1)
        nll = 0.5 * self.y @ alpha + chol.diagonal().log().sum() + 0.5 * n * math.log(2 * math.pi)
        return nll / n

    @torch.no_grad()
    def predict(self, xs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Posterior mean and variance of f at xs."""
        chol = self._cholesky()
        ks = self.kernel(xs, self.x)
        alpha = torch.cholesky_solve(self.y.unsqueeze(1), chol).squeeze(1)
        mean = ks @ alpha
        v = torch.linalg.solve_triangular(chol, ks.T, upper=False)
        var = self.kernel.log_outputscale.exp() - (v * v).sum(dim=0)
        return mean, var.clamp_min(0.0)

    def hyperparameters(self) -> dict:
        return {"lengthscale": self.kernel.log_lengthscale.exp().item(),
                "outputscale": self.kernel.log_outputscale.exp().item(),
                "noise": self.log_noise.exp().item()}
