import torch

from model import MLP, make_batch


def test_forward_on_the_gpu():
    model = MLP().cuda()
    out = model(torch.randn(4, 8, device="cuda"))
    assert out.shape == (4,) and out.is_cuda


def test_batches_are_per_rank_and_reproducible():
    a, b = make_batch(0), make_batch(0)
    assert torch.equal(a[0], b[0]) and not torch.equal(a[0], make_batch(1)[0])
