# fix: {"line": 6, "op": "unique"}
import torch


def f(x):
    u = (torch.unique(x.cpu(), sorted=True)).to(x.device)
    return u
