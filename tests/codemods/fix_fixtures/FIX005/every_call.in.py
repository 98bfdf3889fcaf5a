# fix: {"line": 8, "table": {"torch.cuda.Event": ["torch.Event", true], "torch.cuda.synchronize": ["torch.accelerator.synchronize", false]}}
import torch

device = torch.device("tpx")


def main():
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    return start, end
