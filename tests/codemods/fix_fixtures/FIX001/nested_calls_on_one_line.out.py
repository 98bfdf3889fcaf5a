# fix: {"line": 9}
import torch as T

dev = T.device("tpx")


def scale(x):
    # the full is the operand: the tensor inside its arguments is only a value
    return x * T.full((3,), T.tensor(2.0).item(), device=dev) + T.ones(3, device=dev)
