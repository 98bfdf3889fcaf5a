"""How many processes per node a run command launches, and the device count its runs need.

``torchrun --nproc-per-node N`` (also ``--nproc_per_node``, ``=N``, ``python -m
torch.distributed.run`` / ``torch.distributed.launch``) starts N processes, each wanting a device
of its own (``cuda:{local_rank}``); ``torch.multiprocessing.spawn(fn, nprocs=N)`` does the same
from the program. A tpx run then needs ``TPX_DEVICE_COUNT`` of at least N, and a run with CUDA
redirected to the CPU answers ``torch.cuda.device_count()`` with ``FERRY_REDIRECT_DEVICE_COUNT``
(N), so that ``world_size = torch.cuda.device_count()`` starts as many processes as on the GPU box.
"""

from __future__ import annotations

import logging
import re
import shlex
from pathlib import Path

from tools import repofiles

logger = logging.getLogger(__name__)

TPX_COUNT_ENV = "TPX_DEVICE_COUNT"
REDIRECT_COUNT_ENV = "FERRY_REDIRECT_DEVICE_COUNT"
LAUNCHER_MODULES = frozenset({"torch.distributed.run", "torch.distributed.launch"})
LAUNCHER_SCRIPTS = frozenset({"torchrun"})
MAX_PROCS = 64  # beyond this a number is not a per-node process count for a sandboxed run
_NPROC_FLAGS = ("--nproc-per-node", "--nproc_per_node")
_SEPARATORS = frozenset({"&&", "||", ";", "|", "&"})
# mp.spawn(fn, ..., nprocs=2) / torch.multiprocessing.spawn(..., nprocs=2): a literal count only
_SPAWN_CALL = re.compile(rb"\bspawn\s*\(")
_NPROCS = re.compile(rb"\bnprocs\s*=\s*(?:(?P<n>\d+)\b|(?P<name>[A-Za-z_]\w*)\s*[,)]?)")
_MAX_SCRIPT_BYTES = 1 << 20


def _tokens(command: str | list[str]) -> list[str]:
    if isinstance(command, list):
        if command[:2] == ["/bin/sh", "-c"] and len(command) >= 3:
            return _tokens(command[2])
        return list(command)
    try:
        lex = shlex.shlex(command, posix=True, punctuation_chars=";&|")
        lex.whitespace_split = True
        return list(lex)
    except ValueError:
        return command.split()


def _is_launcher(tokens: list[str], i: int) -> bool:
    tok = tokens[i]
    if tok.rsplit("/", 1)[-1] in LAUNCHER_SCRIPTS:
        return True
    return tok == "-m" and i + 1 < len(tokens) and tokens[i + 1] in LAUNCHER_MODULES


def launcher_procs(command: str | list[str]) -> int | None:
    """The ``--nproc-per-node`` of the first torchrun-style launcher in ``command``, or None (no
    launcher, or a count that is not a number: ``gpu``, ``auto``)."""
    tokens = _tokens(command)
    for i in range(len(tokens)):
        if not _is_launcher(tokens, i):
            continue
        for j in range(i + 1, len(tokens)):
            tok = tokens[j]
            if tok in _SEPARATORS:
                break
            value = None
            for flag in _NPROC_FLAGS:
                if tok == flag and j + 1 < len(tokens):
                    value = tokens[j + 1]
                elif tok.startswith(flag + "="):
                    value = tok.split("=", 1)[1]
            if value is not None:
                return int(value) if value.isdigit() and 0 < int(value) <= MAX_PROCS else None
        return 1  # torchrun's default: one process per node
    return None


def spawn_procs(script: Path) -> int | None:
    """A literal ``nprocs=N`` of a ``spawn(...)`` call in ``script`` (the run's entry file), or None."""
    try:  # the user's file: a FIFO never blocks, a link is not followed
        data = repofiles.read_bytes(script.parent, script.name, max_bytes=_MAX_SCRIPT_BYTES, head=True)
    except repofiles.RepoFileError:
        return None
    counts = [n for n in (_nprocs_of_call(data, m.end()) for m in _SPAWN_CALL.finditer(data))
              if n is not None and 0 < n <= MAX_PROCS]
    return max(counts) if counts else None


def _literal(data: bytes, name: bytes) -> int | None:
    """The value of ``name = <int>`` when the file assigns it exactly one literal (``world_size = 2``)."""
    found = set(re.findall(rb"^[ \t]*" + re.escape(name) + rb"\s*=\s*(\d+)\s*(?:#.*)?$", data, re.M))
    return int(found.pop()) if len(found) == 1 else None


def _nprocs_of_call(data: bytes, start: int) -> int | None:
    """The literal ``nprocs=`` among the arguments of the call whose ``(`` ends at ``start``."""
    depth, i = 1, start
    top: list[bytes] = []  # the call's own argument text (nested calls' arguments left out)
    while i < len(data) and depth and i - start < 4096:
        c = data[i:i + 1]
        depth += {b"(": 1, b")": -1}.get(c, 0)
        if depth == 1 and c != b")":
            top.append(c)
        i += 1
    m = _NPROCS.search(b"".join(top))
    if m is None:
        return None
    return int(m["n"]) if m["n"] else _literal(data, m["name"])


def _scripts(command: str | list[str], root: Path) -> list[Path]:
    """The repository's ``.py`` files the command names (relative to the start directory ``root``)."""
    out: list[Path] = []
    for tok in _tokens(command):
        if tok.endswith(".py") and not tok.startswith(("/", "~")) and ".." not in Path(tok).parts:
            path = root / tok
            if path.is_file() and not path.is_symlink():
                out.append(path)
    return out


def procs_per_node(command: str | list[str], start_dir: Path | None = None) -> int | None:
    """How many processes per node ``command`` starts (None: one process, nothing distributed seen)."""
    n = launcher_procs(command)
    if n is not None:
        return n
    if start_dir is None:
        return None
    found = [c for c in (spawn_procs(p) for p in _scripts(command, start_dir)) if c is not None]
    return max(found) if found else None


def _runs_pytest(command: str | list[str]) -> bool:
    try:
        words = shlex.split(command) if isinstance(command, str) else list(command)
    except ValueError:  # unbalanced quotes: the run itself reports the command
        return False
    return any(Path(w).name in ("pytest", "py.test") for w in words[:3]) or "pytest" in words[1:3]


def device_env(command: str | list[str], start_dir: Path | None, *, device: str, redirect_cuda: str | None,
               env: dict[str, str]) -> dict[str, str]:
    """The variables a run of ``command`` needs for its processes per node (to merge into ``env``,
    the child's environment so far): ``TPX_DEVICE_COUNT`` at least N on tpx (a larger count the
    caller set stays), ``FERRY_REDIRECT_DEVICE_COUNT`` N with the CUDA redirect (unless set).

    A command that starts one process gets N = 1 on both sides: the reference (CUDA redirected,
    one device) and the tpx run (tpx's default is 2 devices) must take the same
    ``device_count() > 1`` branches (``nn.DataParallel``) for their outputs to compare."""
    n = procs_per_node(command, start_dir)
    if n is None and _runs_pytest(command):
        return {}  # a test run: its tests may start jobs of their own; tpx keeps its default count
    n = n or 1
    out: dict[str, str] = {}
    if "tpx" in (device, redirect_cuda):
        try:
            have = int(env.get(TPX_COUNT_ENV, "0"))
        except ValueError:
            have = 0
        out[TPX_COUNT_ENV] = str(max(n, have))
    if redirect_cuda and REDIRECT_COUNT_ENV not in env:
        out[REDIRECT_COUNT_ENV] = str(n)
    if n > 1:
        logger.info("runner: the command starts %d processes per node: %s", n,
                    ", ".join(f"{k}={v}" for k, v in out.items()))
    return out
