# fix: {"line": 6, "op": "nonzero"}
import torch


def f(x):
    idx = x.nonzero()
    return idx
