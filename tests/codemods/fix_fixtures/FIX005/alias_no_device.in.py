# fix: {"line": 7, "table": {"torch.cuda.Stream": ["torch.Stream", true]}}
import torch as T
from torch.cuda import Stream


def main():
    s = Stream(priority=0)
    return s, T.cuda.Stream()
