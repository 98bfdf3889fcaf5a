import torch
import torch.nn.functional as F

from fast_layers import LayerNorm, attention
from model import TinyLM


def test_attention_matches_sdpa_on_gpu():
    q, k, v = (torch.randn(2, 16, 2, 8, device="cuda") for _ in range(3))
    expected = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
    torch.testing.assert_close(attention(q, k, v), expected.transpose(1, 2), rtol=1e-4, atol=1e-5)


def test_layernorm_normalises_on_gpu():
    ln = LayerNorm(32).cuda()
    y = ln(torch.randn(4, 32).cuda() * 5 + 3)
    torch.testing.assert_close(y.mean(dim=-1), torch.zeros(4, device="cuda"), atol=1e-5, rtol=0)


def test_lm_logits_shape():
    model = TinyLM().cuda()
    assert model(torch.randint(0, 24, (3, 20)).cuda()).shape == (3, 20, 24)


def test_training_lowers_the_loss():
    from train import train

    _, losses = train(steps=30)
    assert sum(losses[-5:]) < sum(losses[:5])
