"""A user's own virtualenv for the tests, made in a second: ``python -m venv --without-pip`` and, in
its site-packages, links to the packages of Ferry's venv that torch needs (so it has
torch==2.13.0), but never Ferry itself (no dist-info, no editable finder, no .pth of Ferry's) and,
unless asked, not pytest: the environment a project's own venv is."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

# Ferry's own install in its venv (editable finder, .pth, dist-info): a user's venv has none of it.
_FERRY = ("__editable__", "ferry-", "ferry.", "_ferry", "__pycache__")
_PYTEST = ("pytest", "_pytest", "py.py", "pluggy", "iniconfig", "xdist", "execnet", "hypothesis", "_hypothesis",
           "expecttest")


def make_venv(dest: Path, *, torch: bool = True, pytest: bool = False) -> Path:
    """A venv at ``dest``; returns its ``bin/python``."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(dest)], check=True, timeout=60)
    python = dest / "bin" / "python"
    if not torch:
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
    return python


@pytest.fixture(scope="module")
def venv_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project venv with torch==2.13.0 but neither Ferry nor pytest (a test module takes it with
    ``venv_python = user_venv.venv_python``)."""
    return make_venv(tmp_path_factory.mktemp("user") / "venv")
