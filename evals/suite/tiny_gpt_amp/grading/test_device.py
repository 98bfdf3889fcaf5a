"""What the migrated tiny GPT must do on the accelerator: train under autocast with a GradScaler."""

import os
import subprocess
import sys

import torch

from data import CharTokenizer, get_batch, make_corpus
from model import GPT, GPTConfig

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def accelerator() -> torch.device:
    return torch.accelerator.current_accelerator() or torch.device("cpu")


def test_trains_on_the_accelerator_with_a_grad_scaler():
    import train

    model, _, losses = train.train(steps=8)
    dev = accelerator()
    assert all(p.device.type == dev.type for p in model.parameters())
    assert all(torch.isfinite(torch.tensor(losses)))
    assert sum(losses[-3:]) < sum(losses[:3])


def test_autocast_is_active_on_the_accelerator():
    import train

    model = GPT(GPTConfig()).to(accelerator())
    idx = torch.randint(0, 32, (2, 8), device=accelerator())
    with train.amp_context():
        logits, _ = model(idx)
    assert logits.device.type == accelerator().type
    assert logits.dtype in (torch.float16, torch.bfloat16)  # autocast really ran on this device
    with train.amp_context(enabled=False):
        logits, _ = model(idx)
    assert logits.dtype == torch.float32


def test_first_loss_matches_a_cpu_fp32_forward():
    """Step 0's loss (before any update) is the fp32 CPU model's loss, to fp16 precision."""
    import train

    _, _, losses = train.train(steps=1)
    torch.manual_seed(1337)
    text = make_corpus()
    tok = CharTokenizer(text)
    model = GPT(GPTConfig(vocab_size=tok.vocab_size))
    xb, yb = get_batch(tok.encode(text), 16, 8, torch.Generator().manual_seed(1337))
    with torch.no_grad():
        _, ref = model(xb, yb)
    assert abs(losses[0] - ref.item()) <= 1e-2 * abs(ref.item()), (losses[0], ref.item())


def test_seeded_training_is_reproducible():
    import train

    _, _, a = train.train(steps=3)
    _, _, b = train.train(steps=3)
    assert a == b


def test_sampling_on_the_accelerator():
    import train

    model, tok, _ = train.train(steps=2)
    text = train.sample(model, tok, prompt="the ", n=10)
    assert text.startswith("the ") and len(text) == 14
    assert set(text) <= set(tok.chars)


def test_script_runs():
    proc = subprocess.run(
        [sys.executable, "train.py", "--steps", "3", "--sample", "5"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "step 2 loss" in proc.stdout and "sample:" in proc.stdout


def test_corpus_and_batches_are_deterministic():
    text = make_corpus()
    assert text == make_corpus()
    data = CharTokenizer(text).encode(text)
    x1, y1 = get_batch(data, 16, 4, torch.Generator().manual_seed(3))
    x2, y2 = get_batch(data, 16, 4, torch.Generator().manual_seed(3))
    assert torch.equal(x1, x2) and torch.equal(x1[:, 1:], y1[:, :-1])
