"""torch.compile with Inductor in the reference run (CUDA redirected to the CPU) and in the target run (tpx).

Each test is one sandboxed run that compiles a tiny model a few times (Inductor's C++ compile is the
cost): the three configs cover the default mode, ``mode="reduce-overhead"`` (CUDA graphs fall back
as on the CPU), ``mode="max-autotune"``, ``fullgraph=True`` and ``dynamic=True``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tools.runner.api import run
from tools.runner.models import RunRequest

SCRIPTS = Path(__file__).resolve().parent / "scripts"

CONFIGS = ("default", "reduce-overhead+dynamic", "max-autotune+fullgraph")
pytestmark = pytest.mark.slow


def _check_configs(result, device: str) -> None:
    assert result.status == "ok", result.stderr_tail[-4000:]
    out = result.stdout_tail
    for config in CONFIGS:
        steps = re.findall(rf"^{re.escape(config)} step \d: (.*)$", out, re.M)
        assert steps and all(s == f"device {device} dtype torch.bfloat16 close True" for s in steps), out
        # Dynamo treated the redirect's replacements as torch's own: no graph break on any of them
        assert f"{config}: graph breaks 0 grad True" in out, out


def test_reference_run_compiles_with_cuda_redirected(tmp_path):
    cmd = ["python", "compile_modes.py", "cuda", *CONFIGS]
    res = run(RunRequest(path=SCRIPTS, command=cmd, device="cpu", redirect_cuda="cpu", artifacts_dir=tmp_path,
                         timeout_s=600))
    _check_configs(res, "cpu")


def test_target_run_compiles_on_tpx(tmp_path):
    cmd = ["python", "compile_modes.py", "tpx", *CONFIGS]
    res = run(RunRequest(path=SCRIPTS, command=cmd, device="tpx", artifacts_dir=tmp_path, timeout_s=600))
    _check_configs(res, "tpx")


def test_dynamo_never_imports_ferry_by_name_in_a_users_interpreter(tmp_path, venv_python):
    # Dynamo meets replacements it cannot put in a graph: they run eagerly at a graph break, and
    # Dynamo never inlines them (inlining re-imported their module by name: "No module named 'tools'")
    res = run(RunRequest(path=SCRIPTS, command=["python", "compile_user_python.py"], device="cpu",
                         redirect_cuda="cpu", artifacts_dir=tmp_path, timeout_s=600, python=venv_python))
    assert res.status == "ok", res.stderr_tail[-4000:]
    assert "same True" in res.stdout_tail
