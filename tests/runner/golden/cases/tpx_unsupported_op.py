import torch

mask = torch.tensor([0.0, 1.0, 2.0], device="tpx")
print(torch.nonzero(mask))
