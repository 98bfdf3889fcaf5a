"""Hidden grading tests: device-generic (the accelerator when one is loaded, else the CPU)."""

import pathlib
import re
import subprocess
import sys

import torch

DEVICE = torch.accelerator.current_accelerator() or torch.device("cpu")
REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent


def torchrun(*args: str) -> list[tuple[int, float, str, float]]:
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "train.py", *args],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = re.findall(r"^step (\d+) loss ([0-9.]+) device (\S+) scale (\S+)$", proc.stdout, re.M)
    return [(int(s), float(loss), dev, float(scale)) for s, loss, dev, scale in rows]


def test_two_ranks_train_with_a_grad_scaler_on_the_accelerator():
    rows = torchrun("--steps", "6")
    assert [r[0] for r in rows] == list(range(6))
    assert {r[2] for r in rows} == {f"{DEVICE.type}:0"}
    assert rows[-1][1] < rows[0][1]  # it learns
    assert all(r[3] > 1 for r in rows)  # the scaler scales (fp16 autocast is on)


def test_without_amp_the_first_loss_is_close_and_both_learn():
    """Step 0's forward differs from the fp32 one by fp16 rounding only. Later steps are another training
    on any device where autocast is live (CUDA, the accelerator): clip_grad_norm_ runs on the scaled
    gradients, so AdamW sees them clipped 65536 times smaller than without amp."""
    amp, full = torchrun("--steps", "4"), torchrun("--steps", "4", "--no-amp")
    assert all(a[3] == 1 or a[3] > 1 for a in amp) and all(f[3] == 1 for f in full)
    assert [a[0] for a in amp] == [f[0] for f in full] == list(range(4))
    assert abs(amp[0][1] - full[0][1]) < 1e-3 * full[0][1]
    assert amp[-1][1] < amp[0][1] and full[-1][1] < full[0][1]
