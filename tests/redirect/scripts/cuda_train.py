# Original CUDA-style training code: must run unchanged under the redirect.
import torch
import torch.nn as nn

assert torch.cuda.is_available()
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
torch.cuda.manual_seed_all(0)
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.05)
scaler = torch.cuda.amp.GradScaler()
x = torch.randn(32, 8, device="cuda")
y = torch.randn(32, 1).to(device)
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
start.record()
for step in range(3):
    opt.zero_grad()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = nn.functional.mse_loss(model(x).float(), y)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    print(f"loss {loss.item():.6f}")
end.record()
torch.cuda.synchronize()
assert start.elapsed_time(end) >= 0
print("mem", torch.cuda.memory_allocated(), torch.cuda.get_device_name(0))
print("devices", x.device.type, next(model.parameters()).device.type)
torch.save(model.state_dict(), "ckpt.pt")
state = torch.load("ckpt.pt")
print("loaded", next(iter(state.values())).device.type)
torch.cuda.nvtx.range_push("eval")
legacy = torch.cuda.FloatTensor([1.0, 2.0])
torch.cuda.nvtx.range_pop()
print("legacy", legacy.device.type, legacy.dtype)
