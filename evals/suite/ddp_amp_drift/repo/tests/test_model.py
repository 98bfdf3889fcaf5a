import torch

from model import TinyGPT, make_dataset


def test_dataset_is_reproducible():
    a, b = make_dataset(), make_dataset()
    assert torch.equal(a.tensors[0], b.tensors[0]) and torch.equal(a.tensors[1], b.tensors[1])


def test_the_model_predicts_one_token_per_position():
    torch.manual_seed(0)
    x, _ = make_dataset(n=4).tensors
    assert TinyGPT()(x).shape == (4, 32, 32)
