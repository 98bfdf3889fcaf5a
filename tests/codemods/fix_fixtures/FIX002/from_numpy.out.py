# fix: {"line": 7}
import numpy as np
import torch


def load(y):
    return torch.from_numpy(y).float()
