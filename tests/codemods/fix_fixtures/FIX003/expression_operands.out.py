# fix: {"line": 6, "op": "masked_select", "arg_count": 2}
import torch


def f(a, b, m):
    return (torch.masked_select((a + b).cpu(), (m > 0).cpu())).to((a + b).device), (a - b).nonzero()
