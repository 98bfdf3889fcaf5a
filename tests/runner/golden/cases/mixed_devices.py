import torch

a = torch.ones(2, device="tpx")
b = torch.ones(2)
print(a + b)
