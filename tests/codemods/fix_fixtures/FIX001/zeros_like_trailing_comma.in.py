# fix: {"line": 8}
import torch

device = torch.accelerator.current_accelerator(check_available=True) or torch.device("cpu")


def noisy(x, base):
    return x + torch.zeros_like(base, )
