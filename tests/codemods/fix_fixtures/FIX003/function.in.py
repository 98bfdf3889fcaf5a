# fix: {"line": 6, "op": "unique"}
import torch


def f(x):
    u = torch.unique(x, sorted=True)
    return u
