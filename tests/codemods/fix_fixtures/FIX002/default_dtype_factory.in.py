# fix: {"line": 10}
import torch

torch.set_default_dtype(torch.float64)
device = torch.device("cpu")


def kernel(x):
    n = x.shape[0]
    jitter = 1e-6 * torch.eye(n, device=x.device) + torch.arange(n, device=x.device)
    return x @ x.T + jitter


k = kernel(torch.ones(3, 2, dtype=torch.float32, device=device))
print(k.dtype, k.sum().item())
