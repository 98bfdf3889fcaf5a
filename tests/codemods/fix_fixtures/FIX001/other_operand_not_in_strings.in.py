# fix: {"line": 6}
import torch


def report(s, x):
    print("s", x + torch.ones(3))
