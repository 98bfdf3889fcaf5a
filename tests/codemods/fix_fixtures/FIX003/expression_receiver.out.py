# fix: {"line": 6, "op": "nonzero"}
import torch


def f(a, b):
    return (a - b).cpu().nonzero().to((a - b).device)
