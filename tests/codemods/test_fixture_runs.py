"""Each runnable .out.py fixture runs on CPU (tpx autoload off) and on tpx, in subprocesses,
and prints the same thing on both."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("fixture_cases", Path(__file__).with_name("fixture_cases.py"))
fixture_cases = importlib.util.module_from_spec(_spec)
sys.modules["fixture_cases"] = fixture_cases
_spec.loader.exec_module(fixture_cases)  # type: ignore[union-attr]
RUNNABLE = [c for c in fixture_cases.cases() if c.runnable]
ROOT = Path(__file__).resolve().parents[2]

# runs the fixture as __main__ after checking which device the rewritten code will pick
_RUNNER = """
import runpy, sys, torch
want = sys.argv[1]
acc = torch.accelerator.current_accelerator(check_available=True)
got = acc.type if acc is not None else "cpu"
assert got == want, f"expected to run on {want}, torch.accelerator picked {got}"
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def _env(autoload: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_DEVICE_BACKEND_AUTOLOAD", "TPX_"))}
    env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "1" if autoload else "0"
    env["PYTHONPATH"] = str(ROOT)
    env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def _run(path: Path, device: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", _RUNNER, device, str(path)], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path, env=_env(autoload=device == "tpx"))


@lru_cache(maxsize=1)
def tpx_available() -> str | None:
    """None when tpx works, else why not (the backend is built by another issue)."""
    probe = "import torch, backend; x = torch.ones(2, device='tpx'); assert (x + 1).sum().item() == 4"
    try:
        res = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300,
                             env=_env(autoload=True), cwd=ROOT)
    except subprocess.TimeoutExpired:
        return "tpx probe timed out"
    if res.returncode != 0:
        return f"tpx backend unavailable: {res.stderr.strip().splitlines()[-1:] or res.returncode}"
    return None


@pytest.mark.slow
@pytest.mark.parametrize("case", RUNNABLE, ids=lambda c: c.id)
def test_out_fixture_same_output_on_cpu_and_tpx(case, tmp_path):
    cpu = _run(case.expected, "cpu", tmp_path)
    assert cpu.returncode == 0, cpu.stderr[-2000:]
    assert cpu.stdout.strip(), "a fixture must print something to compare"
    if "cpu-only" in case.directives:
        return
    why = tpx_available()
    if why is not None:
        pytest.skip(why)
    tpx = _run(case.expected, "tpx", tmp_path)
    assert tpx.returncode == 0, tpx.stderr[-2000:]
    assert tpx.stdout == cpu.stdout
