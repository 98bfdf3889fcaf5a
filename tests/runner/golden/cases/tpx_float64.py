import torch

weights = torch.randn(4, 4, device="tpx")
precise = weights.double()
