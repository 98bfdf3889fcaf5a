"""A small model compiled as GPT training scripts compile theirs (``compile = True``), in the configs given.

``python compile_modes.py DEVICE CONFIG...``: DEVICE is ``cuda`` (the original: run it with CUDA
redirected) or ``tpx`` (the migrated program); CONFIG is ``default``, ``reduce-overhead+dynamic`` or
``max-autotune+fullgraph``. On CUDA the forward asks and calls what CUDA programs do inside a
compiled region (is_available, the capability and properties, .cuda(), a factory on "cuda",
synchronize, autocast("cuda")).
"""
import sys

import torch
import torch.nn as nn

device = sys.argv[1]
CONFIGS = {"default": {}, "reduce-overhead+dynamic": {"mode": "reduce-overhead", "dynamic": True},
           "max-autotune+fullgraph": {"mode": "max-autotune", "fullgraph": True}}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 16)
        self.out = nn.Linear(16, 4)

    def forward(self, x):
        if device == "cuda":
            if torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 0):
                x = x.cuda()
            scale = torch.cuda.get_device_properties(0).warp_size // 32
            bias = torch.zeros(16, device="cuda") + 0.5 * scale
            torch.cuda.synchronize()
        else:
            bias = torch.zeros(16, device=device) + 0.5
        h = torch.relu(self.fc(x) + bias)
        with torch.autocast(device, dtype=torch.bfloat16):
            y = self.out(h)
        return y


for config in sys.argv[2:]:
    torch._dynamo.reset()
    torch.manual_seed(0)
    net = Net().to(device)
    compiled = torch.compile(net, **CONFIGS[config])
    batches = (4, 6) if "dynamic" in config else (4,)
    for step, batch in enumerate(batches):
        x = torch.randn(batch, 8, device=device)
        eager, out = net(x), compiled(x)
        close = torch.allclose(eager.float(), out.float(), atol=2e-2, rtol=2e-2)
        out.float().sum().backward()
        print(f"{config} step {step}: device {out.device.type} dtype {out.dtype} close {close}")
    breaks = sum(torch._dynamo.utils.counters["graph_break"].values())
    print(f"{config}: graph breaks {breaks} grad {net.fc.weight.grad.abs().sum().item() > 0}")
