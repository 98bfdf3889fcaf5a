"""The interpreter a run's user code runs with (``RunRequest.python``): Ferry's own, or the user's.

A user's interpreter (a project's virtualenv) needs nothing of Ferry's installed: the runner puts
its bootstrap (``tools/runner/child``) first on the child's PYTHONPATH and the bootstrap imports
Ferry's ``backend``/``tools`` from the read-only Ferry tree only for the time of that import. It
does need torch, and exactly the torch Ferry's tpx backend is built against, on the same Python
minor version (the prebuilt extension is per ABI). ``inspect_interpreter`` asks the interpreter
itself (``-I -S -c``: no site, so none of the environment's code runs on the host; no torch
import) and refuses one that cannot
work, saying what to do.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

logger = logging.getLogger(__name__)

TORCH_VERSION = "2.13.0"  # what backend/ is built against (pyproject pins it)
PROBE_TIMEOUT_S = 30.0
# Printed by the interpreter under test, started with -I -S: no site, so no .pth file of its
# environment runs on the host (only the sandbox runs the environment's code). Its site-packages
# are computed as site would add them, and torch/pytest looked up there by their metadata:
# nothing is imported from the environment.
_PROBE = r"""
import importlib.metadata as md, json, os, site, sys
# without site, a venv's prefix is not set: found as site.venv() would, by its pyvenv.cfg (PEP 405)
exe_dir = os.path.dirname(os.path.abspath(sys.executable))
prefix, system = sys.prefix, True
for cand in (exe_dir, os.path.dirname(exe_dir)):
    cfg = os.path.join(cand, "pyvenv.cfg")
    if os.path.isfile(cfg):
        prefix = cand
        with open(cfg) as fh:
            pairs = [l.split("=", 1) for l in fh if "=" in l]
        system = any(k.strip() == "include-system-site-packages" and v.strip().lower() == "true" for k, v in pairs)
        break
prefixes = [prefix] + ([sys.base_prefix] if system and prefix != sys.prefix else [])
if prefix == sys.prefix:
    prefixes = [sys.prefix, sys.exec_prefix]
paths = [p for p in site.getsitepackages(prefixes) if os.path.isdir(p)]
def ver(name):
    for dist in md.distributions(name=name, path=paths):
        return dist.version
    return None
print(json.dumps({"version": list(sys.version_info[:3]), "prefix": prefix, "base_prefix": sys.base_prefix,
                  "exec_prefix": prefix if prefix != sys.prefix else sys.exec_prefix,
                  "torch": ver("torch"), "pytest": ver("pytest") is not None}))
"""


class InterpreterError(ValueError):
    """The interpreter given cannot run the user's code under Ferry (the message says why and what to do)."""


@dataclass(frozen=True)
class Interpreter:
    path: str  # absolute, as given (a venv's bin/python link is kept: the link is what selects the venv)
    version: tuple[int, int, int]
    prefix: str
    base_prefix: str
    exec_prefix: str
    torch: str | None  # torch's version there, None without torch
    has_pytest: bool

    @property
    def is_ferrys(self) -> bool:
        """The interpreter Ferry itself runs on (its venv): its runs may start warm."""
        return _same(self.prefix, sys.prefix)

    @property
    def bin_dir(self) -> Path:
        return Path(self.path).parent

    def roots(self) -> list[Path]:
        """What the sandbox binds read-only for it: its prefixes, and the directories of its binary
        (the path given and the file it resolves to) where they lie outside them. Never more: a
        ``~/bin/python`` link must not show the whole home directory to the run."""
        prefixes = {Path(p).resolve() for p in (self.prefix, self.base_prefix, self.exec_prefix)}
        roots = set(prefixes)
        for d in (self.bin_dir.resolve(), Path(self.path).resolve().parent):
            if not any(d == p or p in d.parents for p in prefixes):
                roots.add(d)
        return sorted(r for r in roots if str(r) not in ("/", "/usr"))


def _same(a: str, b: str) -> bool:
    try:
        return Path(a).resolve() == Path(b).resolve()
    except OSError:
        return False


def ferrys_interpreter() -> str:
    return sys.executable


def default_python(environ: dict[str, str] | None = None) -> str:
    """The active virtualenv's interpreter ($VIRTUAL_ENV/bin/python when set, present and not Ferry's
    own venv), else Ferry's."""
    env = os.environ if environ is None else environ
    venv = env.get("VIRTUAL_ENV")
    if venv and not _same(venv, sys.prefix):
        cand = Path(venv) / "bin" / "python"
        if cand.is_file() and os.access(cand, os.X_OK):
            return str(cand)
        logger.warning("VIRTUAL_ENV=%s has no bin/python; the runs use Ferry's interpreter", venv)
    return sys.executable


def inspect_interpreter(path: str | Path) -> Interpreter:
    """The interpreter at ``path``, checked: it exists, is executable, is Python 3 of Ferry's minor
    version, and has torch==TORCH_VERSION. InterpreterError says what is wrong and what to do."""
    given = Path(os.path.expanduser(str(path)))
    absolute = given if given.is_absolute() else Path.cwd() / given
    if not absolute.exists():
        raise InterpreterError(f"--python {path}: no such file; give the path of a Python interpreter, e.g. "
                               "--python .venv/bin/python")
    if absolute.is_dir():
        raise InterpreterError(f"--python {path}: is a directory; give the interpreter inside it, e.g. "
                               f"--python {given / 'bin' / 'python'}")
    if not os.access(absolute, os.X_OK):
        raise InterpreterError(f"--python {path}: not executable (chmod +x it, or give another interpreter)")
    st = absolute.stat()
    return _inspect(str(absolute), st.st_mtime_ns, st.st_ino)


@lru_cache(maxsize=16)
def _inspect(path: str, _mtime: int, _inode: int) -> Interpreter:
    try:
        proc = subprocess.run([path, "-I", "-S", "-c", _PROBE], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
                              env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"},
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise InterpreterError(f"--python {path}: did not answer within {PROBE_TIMEOUT_S:.0f}s "
                               "(is it a Python interpreter?)") from None
    except OSError as exc:
        raise InterpreterError(f"--python {path}: cannot be started ({exc.strerror}); is it a Python "
                               "interpreter?") from None
    interp = _parse(path, proc.stdout) if proc.returncode == 0 else None
    if interp is None:
        why = (proc.stderr or proc.stdout).strip().splitlines()
        raise InterpreterError(f"--python {path}: not a Python 3 interpreter Ferry can use"
                               + (f" ({why[-1][:200]})" if why else "") + "; give a python3 binary")
    _check(interp)
    return interp


def _parse(path: str, stdout: str) -> Interpreter | None:
    try:
        raw = json.loads(stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None
    if not isinstance(raw, dict):
        return None
    ver = raw.get("version")
    if not (isinstance(ver, list) and len(ver) == 3 and all(isinstance(v, int) for v in ver)):
        return None
    prefix, base, exec_prefix, torch = (raw.get(k) for k in ("prefix", "base_prefix", "exec_prefix", "torch"))
    if not (isinstance(prefix, str) and isinstance(base, str) and isinstance(exec_prefix, str)):
        return None
    return Interpreter(path=path, version=(ver[0], ver[1], ver[2]), prefix=prefix, base_prefix=base,
                       exec_prefix=exec_prefix, torch=torch if isinstance(torch, str) else None,
                       has_pytest=raw.get("pytest") is True)


def _check(interp: Interpreter) -> None:
    major, minor, _ = interp.version
    want = f"{sys.version_info.major}.{sys.version_info.minor}"
    shown = ".".join(map(str, interp.version))
    if major != 3:
        raise InterpreterError(f"--python {interp.path}: Python {shown}, not Python 3; give a python3 interpreter")
    if (major, minor) != sys.version_info[:2]:
        raise InterpreterError(f"--python {interp.path}: Python {shown}; Ferry's tpx backend and run hooks are built "
                               f"for Python {want}: use a Python {want} environment (python{want} -m venv ...)")
    if interp.torch is None:
        raise InterpreterError(f"--python {interp.path}: has no torch, which the user's code needs under Ferry; "
                               f"install it there ({interp.path} -m pip install torch=={TORCH_VERSION}) or give "
                               "the interpreter of an environment that has it")
    if interp.torch.split("+")[0] != TORCH_VERSION:
        raise InterpreterError(f"--python {interp.path}: has torch {interp.torch}, but Ferry's tpx backend needs "
                               f"torch=={TORCH_VERSION} exactly; install it there ({interp.path} -m pip install "
                               f"torch=={TORCH_VERSION}) or use a separate environment for the migration")
