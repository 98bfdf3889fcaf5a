import pytest
import torch

from data import CharData, make_corpus
from model import GPT, GPTConfig


def test_forward_on_gpu_gives_logits_and_loss():
    model = GPT(GPTConfig(vocab_size=20)).cuda()
    idx = torch.randint(0, 20, (4, 16), device="cuda")
    targets = torch.randint(0, 20, (4, 16), device="cuda")
    logits, loss = model(idx, targets)
    assert logits.shape == (4, 16, 20)
    assert loss.item() == pytest.approx(torch.log(torch.tensor(20.0)).item(), rel=0.05)


def test_generate_extends_the_prompt():
    data = CharData(make_corpus(50))
    model = GPT(GPTConfig(vocab_size=data.vocab_size)).cuda()
    out = model.generate(torch.zeros((1, 1), dtype=torch.long, device="cuda"), max_new_tokens=10)
    assert out.shape == (1, 11)
    assert len(data.decode(out[0].tolist())) == 11


def test_short_run_lowers_the_loss(run_train):
    g = run_train("--max_iters=20")
    assert g["device_type"] == "cuda"
    assert sum(g["history"][-5:]) < sum(g["history"][:5])


def test_configurator_overrides_keep_their_type(run_train):
    g = run_train("config/tiny.py", "--batch_size=4")
    assert g["config"]["batch_size"] == 4 and g["config"]["max_iters"] == 10
    with pytest.raises(AssertionError):
        run_train("--max_iters=ten")
