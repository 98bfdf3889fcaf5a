# fix: {"line": 6}
import torch


def load(y):
    return (torch.from_numpy(y)).tpx()
