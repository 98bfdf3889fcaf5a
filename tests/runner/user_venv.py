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
# torch and what torch itself needs at run time (its requirements and theirs, numpy where present):
# all a torch-only project venv holds. Matched on the entry's name up to its first "-", "." or ".py".
TORCH_ONLY = frozenset({"torch", "torchgen", "functorch", "numpy", "sympy", "isympy", "mpmath", "networkx", "jinja2",
                        "markupsafe", "fsspec", "filelock", "typing_extensions", "setuptools", "_distutils_hack"})
_PYTEST = ("pytest", "_pytest", "py.py", "pluggy", "iniconfig", "xdist", "execnet", "hypothesis", "_hypothesis",
           "expecttest")


def make_venv(dest: Path, *, torch: bool = True, pytest: bool = False, only_torch: bool = False) -> Path:
    """A venv at ``dest``; returns its ``bin/python``. ``only_torch``: torch and its own runtime
    requirements only (``TORCH_ONLY``): no pydantic, nothing else of Ferry's dependencies."""
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
        if only_torch and name.split("-")[0].split(".")[0].lower() not in TORCH_ONLY:
            continue
        (theirs / name).symlink_to(entry)
    # torch's console script, as pip writes it into a venv's bin/
    torchrun = dest / "bin" / "torchrun"
    torchrun.write_text(f"#!{python}\nimport sys\nfrom torch.distributed.run import main\nsys.exit(main())\n")
    torchrun.chmod(0o755)
    return python


@pytest.fixture(scope="module")
def venv_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project venv with torch==2.13.0 but neither Ferry nor pytest (a test module takes it with
    ``venv_python = user_venv.venv_python``)."""
    return make_venv(tmp_path_factory.mktemp("user") / "venv")


@pytest.fixture(scope="module")
def torch_only_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project venv with torch==2.13.0 and torch's own requirements only: no pydantic, no Ferry,
    no pytest (``torch_only_python = user_venv.torch_only_python``)."""
    return make_venv(tmp_path_factory.mktemp("torch-only") / "venv", only_torch=True)
