"""Hidden grading tests: device-generic (the accelerator when one is loaded, else the CPU)."""

import math

import numpy as np
import pytest
import torch

from data import make_dataset
from train import confusion_matrix, train

DEVICE = torch.accelerator.current_accelerator() or torch.device("cpu")

# train(steps=20) of the original program, CUDA redirected to the CPU (seed 0)
REFERENCE_LOSS = [1.377894, 1.399861, 1.340849, 1.338833, 1.377328, 1.353607, 1.297106, 1.284052,
                  1.275406, 1.253322, 1.252496, 1.19716, 1.133741, 1.113234, 1.079337, 1.065361,
                  1.021467, 0.878845, 0.87318, 0.865905]
REFERENCE_MATRIX = [[80, 26, 10, 15], [11, 92, 5, 21], [8, 15, 73, 21], [5, 7, 3, 120]]


def test_training_runs_on_the_accelerator():
    model, history, matrix = train(steps=30, log_every=100)
    assert next(model.parameters()).device.type == DEVICE.type
    assert all(type(v) is float and math.isfinite(v) for values in history.values() for v in values)
    assert np.mean(history["loss"][-5:]) < np.mean(history["loss"][:5])
    assert isinstance(matrix, np.ndarray) and matrix.sum() == 512


def test_history_matches_the_cpu_reference():
    torch.set_float32_matmul_precision("highest")
    model, history, matrix = train(steps=20, log_every=100)
    assert next(model.parameters()).device.type == DEVICE.type
    assert history["loss"] == pytest.approx(REFERENCE_LOSS, rel=1e-4, abs=1e-5)
    assert np.abs(matrix - np.array(REFERENCE_MATRIX)).sum() <= 4


def test_confusion_matrix_on_the_accelerator():
    model, _, _ = train(steps=5, log_every=100)
    features, labels = make_dataset(n=64, seed=7)
    matrix = confusion_matrix(model, features, labels)
    assert matrix.sum() == 64
    assert matrix.sum(axis=1).tolist() == np.bincount(labels.numpy(), minlength=4).tolist()
    assert next(model.parameters()).device.type == DEVICE.type


def test_dataset_is_deterministic():
    a, b = make_dataset(n=64, seed=1), make_dataset(n=64, seed=1)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert set(a[1].tolist()) == {0, 1, 2, 3}
