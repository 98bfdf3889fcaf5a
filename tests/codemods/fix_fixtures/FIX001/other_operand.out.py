# fix: {"line": 7}
import torch


def step(n, x):
    # no device variable: the other operand's device (not n, the factory's own argument)
    return torch.arange(n, device=x.device) + x
