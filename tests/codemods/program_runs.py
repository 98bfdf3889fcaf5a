"""Running a migrated fixture as a program, on the CPU (tpx not loaded) or on tpx: shared by the test modules
that check what a rewritten program does (its device, its output), not only its text."""

from __future__ import annotations

import os
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def env_for(tpx: bool) -> dict[str, str]:
    """This environment with tpx autoloaded (``tpx``) or not, no GPU visible, and the repository importable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_DEVICE_BACKEND_AUTOLOAD", "TPX_"))}
    env.update(TORCH_DEVICE_BACKEND_AUTOLOAD="1" if tpx else "0", CUDA_VISIBLE_DEVICES="", PYTHONPATH=str(ROOT))
    return env


def run_with(driver: str, path: Path, args: list[str], cwd: Path, *, tpx: bool = False,
             extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python -c driver path args...`` (the driver runs ``path`` as __main__ and prints what it ran on)."""
    return subprocess.run([sys.executable, "-c", driver, str(path), *args], capture_output=True, text=True,
                          timeout=120, cwd=cwd, env=env_for(tpx) | (extra_env or {}))


@lru_cache(maxsize=1)
def tpx_missing() -> str | None:
    """Why tpx cannot run here (a skip reason), or None."""
    probe = "import torch; x = torch.ones(2, device='tpx'); assert (x + 1).sum().item() == 4"
    res = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300,
                         env=env_for(tpx=True), cwd=ROOT)
    return None if res.returncode == 0 else f"tpx backend unavailable: {res.stderr.strip()[-300:]}"
