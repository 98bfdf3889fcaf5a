import torch

from attn import AttentionBlock, TinyLM


def test_block_is_causal():
    torch.manual_seed(0)
    block = AttentionBlock().cuda()
    x = torch.randn(1, 6, 32, device="cuda")
    y1 = block(x)
    x2 = x.clone()
    x2[:, -1] += 1.0
    y2 = block(x2)
    # Changing the last position must not change earlier outputs.
    assert torch.allclose(y1[:, :-1], y2[:, :-1], atol=1e-5)


def test_lm_logits_shape():
    model = TinyLM().cuda()
    tokens = torch.randint(0, 64, (2, 16)).cuda()
    assert model(tokens).shape == (2, 16, 64)
