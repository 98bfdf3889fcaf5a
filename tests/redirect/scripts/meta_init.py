"""A model built under torch.device("meta"), materialised on CUDA and initialised there (FSDP2's recipe)."""
import torch
from torch import nn

torch.manual_seed(0)
with torch.device("meta"):
    model = nn.Linear(4, 3)
    scratch = torch.zeros(2)
print("built", model.weight.device, scratch.device)
model.to_empty(device="cuda")
model.reset_parameters()
print("init", model.weight.device, [round(v, 6) for v in model.weight.flatten().tolist()])
torch.set_default_device("meta")
print("default", torch.empty(1).device)
torch.set_default_device("cpu")
