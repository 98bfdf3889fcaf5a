# A whole training step captured in a CUDA graph and replayed per batch (as the PyTorch docs show),
# next to the same training done eagerly.
import torch
import torch.nn as nn
import torch.nn.functional as F


def setup():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(64, 4, device="cuda")
    y = x.sum(1, keepdim=True).sin()
    batches = torch.randint(0, 64, (6, 16), device="cuda")
    return model, opt, x, y, batches


def warm_up(model, opt, x, y):
    for _ in range(2):
        opt.zero_grad(set_to_none=True)
        F.mse_loss(model(x), y).backward()
        opt.step()


def graphed():
    model, opt, x, y, batches = setup()
    static_x, static_y = x[batches[0]].clone(), y[batches[0]].clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        warm_up(model, opt, static_x, static_y)
    torch.cuda.current_stream().wait_stream(s)
    before = [p.detach().clone() for p in model.parameters()]
    g = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(g):
        capturing = torch.cuda.is_current_stream_capturing()
        static_loss = F.mse_loss(model(static_x), static_y)
        static_loss.backward()
        opt.step()
    unchanged = all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    print("capture", capturing, "params unchanged", unchanged, "capturing after", torch.cuda.is_current_stream_capturing())
    losses = []
    for idx in batches:
        static_x.copy_(x[idx])
        static_y.copy_(y[idx])
        g.replay()
        losses.append(static_loss.item())
    return losses, [p.detach() for p in model.parameters()]


def eager():
    model, opt, x, y, batches = setup()
    warm_up(model, opt, x[batches[0]], y[batches[0]])
    losses = []
    for idx in batches:
        opt.zero_grad(set_to_none=True)
        loss = F.mse_loss(model(x[idx]), y[idx])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [p.detach() for p in model.parameters()]


g_losses, g_params = graphed()
e_losses, e_params = eager()
print("graph losses", " ".join(f"{v:.6f}" for v in g_losses))
print("eager losses", " ".join(f"{v:.6f}" for v in e_losses))
print("same losses", g_losses == e_losses, "same params", all(torch.equal(a, b) for a, b in zip(g_params, e_params)))
