# fix: {"line": 6}
import torch


def load(y, device):
    t = torch.from_numpy(y).to(device, dtype=torch.float32)
    return t
