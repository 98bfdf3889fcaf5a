"""Fixtures the whole suite shares: a user's own virtualenv, made in seconds.

``make_user_venv(dest)``: ``python -m venv --without-pip`` and, in its site-packages, links to the
packages of Ferry's venv that torch needs (so it has torch==2.13.0), but never Ferry itself (no
dist-info, no editable finder, no .pth of Ferry's) and, unless asked, not pytest: the environment a
project's own venv is. ``only_torch``: torch and the distributions it requires, nothing else,
linked file by file as the eval harness links them into a case's venv (``evals.real_env``)."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from collections.abc import Callable
from pathlib import Path

import pytest

from evals.real_env import link_distributions, torch_closure

# Ferry's own install in its venv (editable finder, .pth, dist-info): a user's venv has none of it.
_FERRY = ("__editable__", "ferry-", "ferry.", "_ferry", "__pycache__")
_PYTEST = ("pytest", "_pytest", "py.py", "pluggy", "iniconfig", "xdist", "execnet", "hypothesis", "_hypothesis",
           "expecttest")


def make_venv(dest: Path, *, torch: bool = True, pytest: bool = False, only_torch: bool = False) -> Path:
    """A venv at ``dest``; returns its ``bin/python``. ``only_torch``: torch and its own runtime
    requirements only: no pydantic, nothing else of Ferry's dependencies."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(dest)], check=True, timeout=60)
    python = dest / "bin" / "python"
    if not torch:
        return python
    if only_torch:
        link_distributions(torch_closure(), dest)  # torch's console scripts (torchrun) included
        return python
    ours = Path(sysconfig.get_paths()["purelib"])
    theirs = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                 capture_output=True, text=True, check=True, timeout=60).stdout.strip())
    for entry in ours.iterdir():
        name = entry.name
        if name.endswith(".pth") or name.startswith(_FERRY):
            continue
        if not pytest and name.startswith(_PYTEST):
            continue
        (theirs / name).symlink_to(entry)
    # torch's console script, as pip writes it into a venv's bin/
    torchrun = dest / "bin" / "torchrun"
    torchrun.write_text(f"#!{python}\nimport sys\nfrom torch.distributed.run import main\nsys.exit(main())\n")
    torchrun.chmod(0o755)
    return python


@pytest.fixture(scope="session")
def make_user_venv() -> Callable[..., Path]:
    """``make_venv`` itself, for a test that needs a venv of its own (no torch, a broken one...)."""
    return make_venv


@pytest.fixture(scope="module")
def venv_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project venv with torch==2.13.0 but neither Ferry nor pytest."""
    return make_venv(tmp_path_factory.mktemp("user") / "venv")


@pytest.fixture(scope="module")
def torch_only_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project venv with torch==2.13.0 and torch's own requirements only: no pydantic, no Ferry,
    no pytest."""
    return make_venv(tmp_path_factory.mktemp("torch-only") / "venv", only_torch=True)
