# The same computation written device-agnostically, run on DEV (argv[1]) without any redirect.
import sys

import torch
import torch.nn as nn

dev = torch.device(sys.argv[1])
torch.manual_seed(0)
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1)).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
scaler = torch.amp.GradScaler(dev.type)
x = torch.randn(32, 8, device=dev)
y = torch.randn(32, 1).to(dev)
for step in range(3):
    opt.zero_grad()
    with torch.autocast(dev.type, dtype=torch.bfloat16):
        loss = nn.functional.mse_loss(model(x).float(), y)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    print(f"loss {loss.item():.6f}")
