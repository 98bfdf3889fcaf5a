import torch

from forecast import Forecaster, get_device
from forecast.data import make_series, make_windows
from forecast.train import train
from forecast.utils.device import describe, to_device


def test_get_device_is_the_gpu():
    device = get_device()
    assert device.type == "cuda"
    assert describe(device) != "cpu"


def test_forecaster_on_gpu_predicts_the_horizon():
    x, y = make_windows(make_series(200), lookback=48, horizon=8)
    model = Forecaster().cuda()
    out = model(x[:16].cuda())
    assert out.shape == (16, 8) and out.is_cuda


def test_to_device_moves_the_whole_batch():
    moved = to_device((torch.zeros(2, 3), torch.ones(2)), get_device())
    assert all(t.device.type == "cuda" for t in moved)


def test_training_beats_the_last_value_baseline():
    model, history = train(epochs=3)
    assert history["loss"][-1] < history["loss"][0]
    x, y = make_windows(make_series(seed=0))
    naive = (y - x[:, -1:]).abs().mean().item()
    assert history["val_mae"][-1] < naive
