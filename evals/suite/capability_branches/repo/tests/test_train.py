import torch

import hardware
from data import make_sequences
from model import Classifier


def test_amp_dtype_is_a_half_type():
    assert hardware.amp_dtype() in (torch.bfloat16, torch.float16)


def test_describe_mentions_the_gpu_name():
    assert torch.cuda.get_device_name(0) in hardware.describe()


def test_fused_and_explicit_attention_agree_on_gpu():
    torch.manual_seed(0)
    fused = Classifier(fused=True).cuda()
    explicit = Classifier(fused=False).cuda()
    explicit.load_state_dict(fused.state_dict())
    tokens, _ = make_sequences(n=8)
    torch.testing.assert_close(fused(tokens.cuda()), explicit(tokens.cuda()), rtol=1e-4, atol=1e-5)


def test_training_learns_the_majority_token():
    from train import train

    _, losses, acc = train(steps=80)
    assert sum(losses[-5:]) < sum(losses[:5])
    assert acc > 0.8
