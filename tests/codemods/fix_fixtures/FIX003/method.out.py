# fix: {"line": 6, "op": "nonzero"}
import torch


def f(x):
    idx = x.cpu().nonzero().to(x.device)
    return idx
