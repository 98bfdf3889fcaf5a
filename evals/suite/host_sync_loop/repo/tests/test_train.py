import numpy as np
import torch

from data import make_dataset
from model import build_model
from train import confusion_matrix, train


def test_model_on_gpu_gives_class_scores():
    model = build_model().cuda()
    features, _ = make_dataset(n=16)
    out = model(features.cuda())
    assert out.shape == (16, 4)
    assert torch.isfinite(out).all()


def test_training_learns_the_classes():
    _, history, matrix = train(steps=40, log_every=100)
    assert np.mean(history["loss"][-5:]) < np.mean(history["loss"][:5])
    assert np.trace(matrix) / matrix.sum() > 0.7


def test_history_holds_plain_numbers():
    _, history, _ = train(steps=3, log_every=100)
    assert all(type(v) is float for values in history.values() for v in values)


def test_confusion_matrix_counts_every_sample():
    features, labels = make_dataset(n=100, seed=2)
    matrix = confusion_matrix(build_model().cuda(), features, labels)
    assert matrix.sum() == 100
    assert matrix.dtype == np.int64
