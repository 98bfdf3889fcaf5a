# fix: {"line": 8, "table": {"torch.cuda.Event": ["torch.Event", true], "torch.cuda.synchronize": ["torch.accelerator.synchronize", false]}}
import torch

device = torch.device("tpx")


def main():
    start = torch.Event(enable_timing=True, device=device)
    end = torch.Event(enable_timing=True, device=device)
    torch.cuda.synchronize()
    return start, end
