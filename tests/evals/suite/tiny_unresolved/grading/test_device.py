import torch
import train

ACCEL = torch.accelerator.current_accelerator() or torch.device("cpu")


def test_the_module_keeps_a_cuda_string():
    # what no correct migration can satisfy: the harness must grade it not resolved
    assert str(train.device) == "cuda"


def test_net_shape():
    assert train.Net()(torch.ones(2, 4)).shape == (2, 1)
