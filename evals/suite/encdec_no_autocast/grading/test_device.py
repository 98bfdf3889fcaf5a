"""What the migrated encoder-decoder training must do on the accelerator (device-generic)."""

import os
import subprocess
import sys

import torch
import torch.nn.functional as F

from model import Seq2SeqTransformer, make_batch

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def accelerator() -> torch.device:
    return torch.accelerator.current_accelerator() or torch.device("cpu")


def cpu_reference_losses(steps: int) -> list[float]:
    """The same float32 loop on the CPU, written here: the numbers the migration must keep."""
    torch.manual_seed(0)
    model = Seq2SeqTransformer()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    data = torch.Generator().manual_seed(1234)
    losses = []
    for _ in range(steps):
        src, tgt_in, tgt = make_batch(32, generator=data)
        logits = model(src, tgt_in)
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), tgt.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
    return losses


def test_trains_on_the_accelerator():
    import train

    model, losses = train.train(steps=6)
    assert all(p.device.type == accelerator().type for p in model.parameters())
    assert losses[-1] < losses[0]


def test_float32_losses_match_a_cpu_run():
    """No autocast anywhere: float32 on the accelerator computes what float32 on the CPU does (docs/numerics.md)."""
    import train

    _, losses = train.train(steps=4)
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(cpu_reference_losses(4)), rtol=1e-5, atol=1e-5)


def test_script_runs():
    proc = subprocess.run([sys.executable, "train.py", "--steps", "3"], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "step 2 loss" in proc.stdout and "final loss" in proc.stdout


def test_batches_are_deterministic():
    a = make_batch(8, generator=torch.Generator().manual_seed(3))
    b = make_batch(8, generator=torch.Generator().manual_seed(3))
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
