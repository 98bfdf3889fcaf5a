"""Hidden grading tests: device-generic (the accelerator when one is loaded, else the CPU)."""

import math
import pathlib

import torch

from data import make_table
from features import Featurizer
from train import serve, train

DEVICE = torch.accelerator.current_accelerator() or torch.device("cpu")
REPO = pathlib.Path(__file__).resolve().parent.parent


def test_training_runs_on_the_accelerator():
    featurizer, model, losses = train(epochs=5)
    assert next(model.parameters()).device.type == DEVICE.type
    assert featurizer.mean.device.type == DEVICE.type
    assert all(math.isfinite(v) for v in losses) and losses[-1] < losses[0]


def test_accelerator_training_agrees_with_cpu_serving_on_every_label():
    featurizer, model, _ = train(epochs=20)
    assert next(model.parameters()).device.type == DEVICE.type
    numeric, category, label = make_table(seed=0)
    with torch.no_grad():
        on_device = model(featurizer(numeric.to(DEVICE), category.to(DEVICE))).argmax(dim=1).cpu()
    on_cpu = serve(featurizer, model, numeric, category)
    assert torch.equal(on_device, on_cpu)
    assert (on_cpu == label).float().mean() > 0.85


def test_features_on_the_accelerator_are_the_cpu_bits():
    numeric, category, _ = make_table(n=400, seed=3)
    featurizer = Featurizer().fit(numeric)
    on_cpu = featurizer(numeric, category)
    on_device = featurizer.to(DEVICE)(numeric.to(DEVICE), category.to(DEVICE))
    assert on_device.device.type == DEVICE.type
    torch.testing.assert_close(on_device.cpu(), on_cpu, rtol=0, atol=0)


def test_the_repos_exact_comparisons_are_kept():
    # a migration may not pass the skew tests by loosening them
    source = (REPO / "tests" / "test_features.py").read_text()
    assert source.count("rtol=0, atol=0") == 1
    assert source.count("torch.equal(") == 3


def test_table_is_deterministic():
    a, b = make_table(n=50, seed=4), make_table(n=50, seed=4)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
