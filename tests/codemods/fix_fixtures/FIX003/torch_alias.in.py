# fix: {"line": 6, "op": "unique"}
import torch as T


def f(a):
    return T.unique(a)
