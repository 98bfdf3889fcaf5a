"""What the migrated checkpoint/resume project must do on the accelerator."""

import os
import subprocess
import sys

import torch

from checkpoint import load_checkpoint, load_for_inference, save_checkpoint
from data import make_blobs
from model import BlobNet

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def accelerator() -> torch.device:
    return torch.accelerator.current_accelerator() or torch.device("cpu")


def cpu_training_state(steps: int = 3):
    """A model, Adam and StepLR trained a few steps on the CPU (a checkpoint from another machine)."""
    torch.manual_seed(3)
    model = BlobNet()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    x, y = make_blobs(64, seed=4)
    for _ in range(steps):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    return model, opt, sched


def test_trains_and_checkpoints_on_the_accelerator(tmp_path):
    import train

    model, opt, history = train.train(epochs=2, ckpt_dir=str(tmp_path))
    dev = accelerator()
    assert all(p.device.type == dev.type for p in model.parameters())
    assert all(s["exp_avg"].device.type == dev.type for s in opt.state.values())
    assert len(history) == 2 and history[1] < history[0]
    assert (tmp_path / "last.pt").is_file() and (tmp_path / "best.pt").is_file()


def test_resume_from_a_cpu_checkpoint_lands_on_the_accelerator(tmp_path):
    cpu_model, cpu_opt, cpu_sched = cpu_training_state()
    path = str(tmp_path / "last.pt")
    save_checkpoint(path, cpu_model, cpu_opt, cpu_sched, 7, 0.5, [1.0, 0.5])
    dev = accelerator()
    model = BlobNet().to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    epoch, best, history = load_checkpoint(path, model, opt, sched)
    assert (epoch, best, history) == (7, 0.5, [1.0, 0.5])
    for p, ref in zip(model.parameters(), cpu_model.parameters(), strict=True):
        assert p.device.type == dev.type
        torch.testing.assert_close(p.detach().cpu(), ref.detach())
    for s in opt.state.values():
        assert s["exp_avg"].device.type == dev.type and s["exp_avg_sq"].device.type == dev.type
    assert sched.last_epoch == 3 and sched.get_last_lr() == cpu_sched.get_last_lr()


def test_best_weights_saved_on_the_cpu_load_on_the_accelerator(tmp_path):
    cpu_model, _, _ = cpu_training_state()
    torch.save(cpu_model.state_dict(), tmp_path / "best.pt")
    model = load_for_inference(str(tmp_path / "best.pt"))
    assert not model.training
    assert all(p.device.type == accelerator().type for p in model.parameters())
    for p, ref in zip(model.parameters(), cpu_model.parameters(), strict=True):
        assert torch.equal(p.detach().cpu(), ref.detach())  # a checkpoint round trip is exact
    x, _ = make_blobs(128, seed=5)
    precision = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")  # full fp32 matmuls on the accelerator too
    try:
        with torch.no_grad():
            out = model(x.to(accelerator())).cpu()
            ref = cpu_model(x)
    finally:
        torch.set_float32_matmul_precision(precision)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)


def test_resumed_training_equals_uninterrupted_training(tmp_path):
    import train

    straight, _, h1 = train.train(epochs=3, ckpt_dir=str(tmp_path / "a"))
    train.train(epochs=2, ckpt_dir=str(tmp_path / "b"))
    resumed, opt, h2 = train.train(epochs=3, ckpt_dir=str(tmp_path / "b"), resume=True)
    assert len(h2) == 3
    torch.testing.assert_close(h2, h1)
    for a, b in zip(straight.parameters(), resumed.parameters(), strict=True):
        assert b.device.type == accelerator().type
        torch.testing.assert_close(a.detach().cpu(), b.detach().cpu())


def test_validation_accuracy_matches_a_cpu_evaluation(tmp_path):
    import train

    model, _, _ = train.train(epochs=1, ckpt_dir=str(tmp_path))
    x, y = make_blobs(256, seed=1)
    on_device = train.accuracy(model, x, y)
    cpu = BlobNet()
    cpu.load_state_dict({k: v.cpu() for k, v in model.state_dict().items()})
    with torch.no_grad():
        reference = (cpu(x).argmax(dim=1) == y).float().mean().item()
    assert abs(on_device - reference) <= 2 / 256, (on_device, reference)  # bf16-rounded matmuls may flip a boundary point


def test_script_resumes(tmp_path):
    ckpt = str(tmp_path / "ck")

    def run(*args):
        proc = subprocess.run(
            [sys.executable, "train.py", "--ckpt-dir", ckpt, *args],
            cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        return proc.stdout

    first = run("--epochs", "1")
    assert "epoch 0 loss" in first and "best model test accuracy" in first
    second = run("--epochs", "2", "--resume")
    assert "resumed from epoch 1" in second and "epoch 1 loss" in second
    assert "epoch 0 loss" not in second


def test_a_cpu_checkpoint_holds_the_whole_training_state(tmp_path):
    model, opt, sched = cpu_training_state()
    path = str(tmp_path / "last.pt")
    save_checkpoint(path, model, opt, sched, 2, 0.75, [0.9, 0.4])
    ckpt = torch.load(path, map_location="cpu")
    assert ckpt["epoch"] == 2 and ckpt["best_acc"] == 0.75 and ckpt["history"] == [0.9, 0.4]
    assert ckpt["model"].keys() == model.state_dict().keys()
    assert len(ckpt["optimizer"]["state"]) == 6 and ckpt["scheduler"]["last_epoch"] == 3
    assert not os.path.exists(path + ".tmp")


def test_blobs_are_deterministic():
    (a, ya), (b, yb) = make_blobs(64), make_blobs(64)
    assert torch.equal(a, b) and torch.equal(ya, yb)
    assert set(ya.tolist()) == {0, 1, 2}
