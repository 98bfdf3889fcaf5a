"""What the migrated MLP training must do on the accelerator (device-generic)."""

import os
import subprocess
import sys

import torch
import torch.nn.functional as F

from model import MLP, make_data

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def accelerator() -> torch.device:
    return torch.accelerator.current_accelerator() or torch.device("cpu")


def cpu_reference_losses(steps: int, batch: int = 64, lr: float = 0.05) -> list[float]:
    """The same training loop on the CPU, written here: the numbers the migration must keep."""
    torch.manual_seed(0)
    x, y = make_data()
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    offsets = list(range(0, x.shape[0], batch))
    losses = []
    for step in range(steps):
        start = offsets[step % len(offsets)]
        loss = F.mse_loss(model(x[start:start + batch]), y[start:start + batch])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def close_per_numerics(target: torch.Tensor, reference: torch.Tensor) -> bool:
    """docs/numerics.md fp32: assert_close defaults, or cosine > 0.99 and max abs < 1e-3."""
    try:
        torch.testing.assert_close(target, reference)
        return True
    except AssertionError:
        pass
    cos = F.cosine_similarity(target.flatten().double(), reference.flatten().double(), dim=0)
    return bool(cos > 0.99 and (target - reference).abs().max() < 1e-3)


def test_trains_on_the_accelerator():
    import train

    model, losses = train.train(steps=10)
    dev = accelerator()
    assert all(p.device.type == dev.type for p in model.parameters())
    assert losses[-1] < losses[0]


def test_losses_match_a_cpu_run():
    import train

    _, losses = train.train(steps=6)
    reference = cpu_reference_losses(6)
    assert close_per_numerics(torch.tensor(losses), torch.tensor(reference)), (losses, reference)


def test_predict_on_the_accelerator_returns_host_values():
    import train

    model = MLP().to(accelerator())
    x, _ = make_data(n=4)
    out = train.predict(model, x)
    assert out.device.type == "cpu"
    with torch.no_grad():
        expected = model.cpu()(x)
    assert close_per_numerics(out, expected)


def test_script_runs_and_saves_weights_that_load_on_the_accelerator(tmp_path):
    ckpt = tmp_path / "mlp.pt"
    proc = subprocess.run(
        [sys.executable, "train.py", "--steps", "4", "--save", str(ckpt)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "step 3 loss" in proc.stdout
    state = torch.load(ckpt, map_location=accelerator())
    assert all(t.device.type == accelerator().type for t in state.values())
    model = MLP().to(accelerator())
    model.load_state_dict(state)


def test_data_is_deterministic():
    x1, y1 = make_data(n=32)
    x2, y2 = make_data(n=32)
    assert torch.equal(x1, x2) and torch.equal(y1, y2)
    assert x1.device.type == "cpu"
