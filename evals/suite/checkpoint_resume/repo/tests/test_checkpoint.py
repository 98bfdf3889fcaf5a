import os

import torch

from checkpoint import load_for_inference
from data import make_blobs
from model import BlobNet
from train import accuracy, train


def test_forward_on_gpu():
    model = BlobNet().cuda()
    x, _ = make_blobs(8)
    assert model(x.cuda()).shape == (8, 3)


def test_checkpoint_holds_the_training_state(tmp_path):
    model, _, history = train(epochs=1, ckpt_dir=str(tmp_path))
    ckpt = torch.load(tmp_path / "last.pt", map_location="cuda")
    assert ckpt["epoch"] == 1 and len(ckpt["history"]) == 1
    assert all(t.is_cuda for t in ckpt["model"].values())
    assert len(ckpt["optimizer"]["state"]) == len(list(model.parameters()))
    assert ckpt["scheduler"]["last_epoch"] == 1


def test_resume_reproduces_uninterrupted_training(tmp_path):
    straight, _, h1 = train(epochs=3, ckpt_dir=str(tmp_path / "a"))
    train(epochs=2, ckpt_dir=str(tmp_path / "b"))
    resumed, _, h2 = train(epochs=3, ckpt_dir=str(tmp_path / "b"), resume=True)
    assert len(h2) == 3
    torch.testing.assert_close(h2, h1)
    for a, b in zip(straight.state_dict().values(), resumed.state_dict().values()):
        torch.testing.assert_close(a, b)


def test_best_model_reloads(tmp_path):
    train(epochs=2, ckpt_dir=str(tmp_path))
    assert os.path.exists(tmp_path / "best.pt")
    model = load_for_inference(str(tmp_path / "best.pt"))
    assert not model.training
    assert accuracy(model, *make_blobs(256, seed=2)) > 0.85
