import torch

from model import Classifier, RMSNorm, make_data
from train import train


def test_rms_norm_gives_unit_root_mean_square():
    x = torch.randn(5, 32) * 7
    out = RMSNorm(32)(x)
    torch.testing.assert_close(out.pow(2).mean(-1), torch.ones(5), rtol=1e-4, atol=1e-4)


def test_forward_shape_on_gpu():
    x, _ = make_data(n=6)
    assert Classifier().cuda()(x.cuda()).shape == (6, 4)


def test_training_lowers_the_loss():
    _, losses = train(steps=10)
    assert losses[-1] < losses[0]
