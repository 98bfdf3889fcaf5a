# fix: {"line": 10}
"""The factory called on the failing line gets the module's device variable."""
import torch

device = torch.device("tpx")


def step(x):
    # the device variable is in scope: it is used, not x.device
    return x + torch.arange(4)
