# fix: {"line": 9}
import torch

device = torch.device("tpx")


def step(x):
    mask = torch.ones(x.shape[0], device=device)
    return x * mask
