"""Train/serve skew tests: what the GPU computes must be bit-identical to the CPU service."""

import torch

from data import make_table
from features import Featurizer
from train import serve, train


def fitted():
    numeric, category, _ = make_table(n=500, seed=1)
    return Featurizer().fit(numeric), numeric, category


def test_gpu_features_equal_cpu_features_exactly():
    featurizer, numeric, category = fitted()
    on_cpu = featurizer(numeric, category)
    on_gpu = featurizer.cuda()(numeric.cuda(), category.cuda())
    torch.testing.assert_close(on_gpu.cpu(), on_cpu, rtol=0, atol=0)


def test_bucketize_on_gpu_puts_values_in_the_same_buckets():
    featurizer, numeric, _ = fitted()
    edges = featurizer.boundaries
    assert torch.equal(torch.bucketize(numeric[:, 0].cuda(), edges.cuda()).cpu(), torch.bucketize(numeric[:, 0], edges))


def test_training_is_bitwise_reproducible_on_gpu():
    _, model_a, losses_a = train(epochs=3)
    _, model_b, losses_b = train(epochs=3)
    assert losses_a == losses_b
    for pa, pb in zip(model_a.parameters(), model_b.parameters()):
        assert torch.equal(pa, pb)


def test_gpu_and_cpu_serving_agree_on_every_label():
    featurizer, model, _ = train(epochs=20)
    numeric, category, label = make_table(seed=0)
    with torch.no_grad():
        gpu_pred = model(featurizer(numeric.cuda(), category.cuda())).argmax(dim=1).cpu()
    cpu_pred = serve(featurizer, model, numeric, category)
    assert torch.equal(gpu_pred, cpu_pred)
    assert (cpu_pred == label).float().mean() > 0.85
