"""What the migrated sums must do on the accelerator: run there, to float32 accuracy (tpx has no float64)."""

import math
import os
import subprocess
import sys

import torch

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def accelerator() -> torch.device:
    return torch.accelerator.current_accelerator() or torch.device("cpu")


def test_the_sum_runs_on_the_accelerator_to_float32_accuracy():
    from series import sum_of_squares

    s = sum_of_squares(1000, device=accelerator().type)
    assert s.device.type == accelerator().type
    assert math.isclose(s.item(), 1000 * 1001 * 2001 // 6, rel_tol=1e-6)


def test_script_runs():
    r = subprocess.run([sys.executable, "series.py", "--n", "1000"], cwd=REPO_ROOT, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "closed form 333833500" in r.stdout
