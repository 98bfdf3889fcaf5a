import torch

from data import CharTokenizer, make_corpus
from model import GPT, GPTConfig
from train import amp_context, train


def test_forward_under_autocast_is_half():
    model = GPT(GPTConfig()).cuda()
    idx = torch.randint(0, 32, (2, 16), device="cuda")
    with amp_context():
        logits, _ = model(idx)
    assert logits.shape == (2, 16, 32)
    assert logits.dtype in (torch.float16, torch.bfloat16)


def test_attention_is_causal():
    torch.manual_seed(0)
    model = GPT(GPTConfig()).cuda().eval()
    idx = torch.randint(0, 32, (1, 12), device="cuda")
    changed = idx.clone()
    changed[0, -1] = (changed[0, -1] + 1) % 32
    a, _ = model(idx)
    b, _ = model(changed)
    assert torch.allclose(a[:, :-1], b[:, :-1], atol=1e-5)


def test_training_lowers_the_loss():
    _, _, losses = train(steps=12, batch=8)
    assert sum(losses[-3:]) < sum(losses[:3])


def test_tokenizer_roundtrip():
    text = make_corpus(5)
    tok = CharTokenizer(text)
    assert tok.decode(tok.encode(text).tolist()) == text
