import torch
import train

ACCEL = torch.accelerator.current_accelerator() or torch.device("cpu")


def test_the_model_trains_on_the_accelerator():
    model = train.Net().to(ACCEL)
    assert train.train(3) > 0
    assert next(model.parameters()).device.type == ACCEL.type
    assert train.device.type == ACCEL.type  # the module's own device is the accelerator, not CUDA


def test_net_shape():
    assert train.Net()(torch.ones(2, 4)).shape == (2, 1)
