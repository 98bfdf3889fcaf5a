import torch

from data import make_data, target
from gp import ExactGP, RBFKernel
from regress import fit, prediction_grid


def test_kernel_is_symmetric_positive_definite():
    x, _ = make_data(20)
    k = RBFKernel().cuda()(x.cuda(), x.cuda())
    torch.testing.assert_close(k, k.T)
    assert torch.linalg.eigvalsh(k + 1e-6 * torch.eye(20, device="cuda")).min() > 0


def test_training_lowers_the_negative_log_likelihood():
    _, history = fit(steps=30)
    assert history[-1] < history[0] - 0.1


def test_posterior_interpolates_the_data():
    model, _ = fit(steps=60)
    mean, var = model.predict(prediction_grid(50))
    rmse = (mean - target(prediction_grid(50).squeeze(1))).pow(2).mean().sqrt().item()
    assert rmse < 0.15
    assert (var >= 0).all() and var.mean() < 0.1


def test_predict_at_training_points_has_small_variance():
    x, y = make_data(30)
    model = ExactGP(x.cuda(), y.cuda())
    _, var = model.predict(x.cuda())
    assert var.max() < model.hyperparameters()["noise"]
