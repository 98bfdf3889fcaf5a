import torch

from data import make_regression
from train import build_model


def test_model_runs_under_autocast():
    features, _ = make_regression(n=16)
    model = build_model(features.shape[1]).cuda()
    x = torch.from_numpy(features).cuda()
    with torch.cuda.amp.autocast(dtype=torch.bfloat16):
        out = model(x)
    assert out.dtype == torch.bfloat16
    assert out.shape == (16, 1)


def test_seeded_init_is_reproducible():
    torch.cuda.manual_seed_all(1)
    torch.manual_seed(1)
    a = torch.randn(4, device="cuda")
    torch.cuda.manual_seed_all(1)
    torch.manual_seed(1)
    b = torch.randn(4, device="cuda")
    assert torch.equal(a, b)
