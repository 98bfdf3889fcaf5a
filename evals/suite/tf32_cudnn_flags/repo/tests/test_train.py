import torch
import torch.backends.cudnn as cudnn

from data import make_images
from model import TextureNet
from train import set_seed, train


def test_forward_on_gpu():
    images, _ = make_images(8)
    out = TextureNet().cuda()(images.cuda())
    assert out.shape == (8, 3) and torch.isfinite(out).all()


def test_deterministic_seed_turns_off_the_benchmark():
    set_seed(0, deterministic=True)
    assert cudnn.deterministic and not cudnn.benchmark


def test_deterministic_training_is_reproducible():
    _, a, _ = train(steps=8, deterministic=True)
    _, b, _ = train(steps=8, deterministic=True)
    assert a == b


def test_training_learns_the_textures():
    _, losses, acc = train(steps=60)
    assert sum(losses[-5:]) < sum(losses[:5])
    assert acc > 0.8
