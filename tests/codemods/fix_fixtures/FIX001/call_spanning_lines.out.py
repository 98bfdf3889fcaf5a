# fix: {"line": 8}
import torch

device = torch.device("tpx")


def pad(x):
    return torch.cat(
        [x, torch.zeros(3, device=device)],
        dim=0,
    )
