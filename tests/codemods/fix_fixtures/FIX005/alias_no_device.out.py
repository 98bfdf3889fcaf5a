# fix: {"line": 7, "table": {"torch.cuda.Stream": ["torch.Stream", true]}}
import torch as T
from torch.cuda import Stream


def main():
    s = T.Stream(priority=0, device=T.accelerator.current_accelerator())
    return s, T.Stream(device=T.accelerator.current_accelerator())
