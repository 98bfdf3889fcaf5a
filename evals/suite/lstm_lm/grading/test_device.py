"""What the migrated LSTM language model must do on the accelerator."""

import math
import os
import subprocess
import sys

import torch
from torch import nn

from corpus import Dictionary, markov_text
from model import RNNModel, repackage_hidden

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def accelerator() -> torch.device:
    return torch.accelerator.current_accelerator() or torch.device("cpu")


def test_trains_on_the_accelerator():
    import main

    model, history, val_loss = main.run(epochs=1, max_batches=10)
    dev = accelerator()
    assert all(p.device.type == dev.type for p in model.parameters())
    assert sum(history[-3:]) < sum(history[:3])
    assert val_loss < math.log(len(Dictionary()))


def test_hidden_state_lives_on_the_accelerator_and_is_cut():
    model = RNNModel(len(Dictionary())).to(accelerator())
    hidden = model.init_hidden(3)
    assert all(h.device.type == accelerator().type for h in hidden)
    tokens = torch.randint(0, len(Dictionary()), (5, 3), device=accelerator())
    out, hidden = model(tokens, hidden)
    assert out.device.type == accelerator().type
    cut = repackage_hidden(hidden)
    assert all(h.grad_fn is None and h.device.type == accelerator().type for h in cut)


def test_batchify_puts_the_stream_on_the_accelerator():
    import main

    data = Dictionary().tokenize(markov_text(100))
    cols = main.batchify(data, 4)
    assert cols.device.type == accelerator().type
    assert torch.equal(cols[:, 2].cpu(), data[50:75])


def test_validation_loss_matches_a_cpu_evaluation():
    """evaluate() of a trained model on the accelerator = the same model evaluated on the CPU here."""
    import main

    model, _, val_loss = main.run(epochs=1, max_batches=6)
    cpu_model = RNNModel(len(Dictionary()))
    cpu_model.load_state_dict({k: v.cpu() for k, v in model.state_dict().items()})
    cpu_model.eval()
    words = markov_text()
    val = Dictionary().tokenize(words[int(0.9 * len(words)):])
    val = val[: (len(val) // 8) * 8].view(8, -1).t().contiguous()
    crit = nn.CrossEntropyLoss()
    total, count = 0.0, 0
    shape = (cpu_model.nlayers, 8, cpu_model.nhid)
    hidden = (torch.zeros(shape), torch.zeros(shape))
    with torch.no_grad():
        for i in range(0, val.size(0) - 1, 16):
            n = min(16, len(val) - 1 - i)
            out, hidden = cpu_model(val[i:i + n], hidden)
            total += n * crit(out.view(-1, cpu_model.ntoken), val[i + 1:i + 1 + n].reshape(-1)).item()
            count += n
    reference = total / count
    assert abs(val_loss - reference) < 1e-3, (val_loss, reference)


def test_script_trains_on_the_accelerator():
    proc = subprocess.run(
        [sys.executable, "main.py", "--epochs", "1", "--max-batches", "4"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"training on {accelerator().type}" in proc.stdout
    assert "final perplexity" in proc.stdout


def test_corpus_is_deterministic_and_in_vocabulary():
    words = markov_text(500)
    assert words == markov_text(500)
    ids = Dictionary().tokenize(words)
    assert int(ids.max()) < len(Dictionary()) and ids.dtype == torch.long
