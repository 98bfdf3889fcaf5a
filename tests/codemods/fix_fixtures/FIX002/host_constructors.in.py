# fix: {"line": 7}
import numpy as np
import torch as T


def load(y):
    t = T.tensor(y)
    return t
