import torch
import torch.nn.functional as F

from model import MLP, make_data


def test_forward_shape_on_gpu():
    model = MLP().cuda()
    x = torch.randn(8, 16, device="cuda")
    out = model(x)
    assert out.shape == (8, 1)
    assert out.is_cuda


def test_training_reduces_loss():
    torch.manual_seed(0)
    x, y = make_data(n=256)
    x, y = x.cuda(), y.cuda()
    model = MLP().cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    first = None
    for _ in range(8):
        loss = F.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        first = first if first is not None else loss.item()
    assert loss.item() < first
