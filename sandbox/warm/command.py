"""Which commands a warm (pre-imported) interpreter can run in place of a fresh ``python``.

Only plain invocations of the sandbox's own interpreter qualify: ``python [-u|-B] SCRIPT ARGS``,
``python -m MODULE ARGS``, ``python -c CODE ARGS``, or a console script of that interpreter's
environment (``pytest -q tests``). Anything a shell would interpret (pipes, redirections,
variables, globs, several commands, ``VAR=value`` prefixes) or any other interpreter option
keeps the ordinary cold start, where the shell and the interpreter do exactly what they always do.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import asdict, dataclass
from typing import Any

_SHELL_CHARS = set(";|&<>$`\\\"'(){}[]*?~!#\n\r\t") - {"'", '"', "\t"}
_OPTIONS_OK = {"-u", "-B"}  # -B: no bytecode writes; the sandbox sets PYTHONDONTWRITEBYTECODE anyway


@dataclass(frozen=True)
class PythonSpec:
    kind: str  # script | module | code
    target: str  # the script path, module name or code
    args: tuple[str, ...]
    unbuffered: bool = False
    program: str = "python"  # the interpreter as the command named it (``python: can't open file ...``)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["args"] = list(self.args)
        return d


def _which(name: str, path_env: str) -> str | None:
    """The program the run's shell would start, judged by absolute paths only: a relative one
    (``bin/python``, a PATH entry ``.``) names a file in the run's workspace, not in ours."""
    if "/" in name:
        return name if os.path.isabs(name) and os.access(name, os.X_OK) else None
    for d in path_env.split(":"):
        if not os.path.isabs(d):
            continue
        cand = os.path.join(d, name)
        if os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    return None


def _venv_of(path: str) -> str | None:
    """The ``pyvenv.cfg`` an interpreter started as ``path`` reads (python looks beside the path
    as named, before resolving links), or None for a base interpreter."""
    d = os.path.dirname(os.path.abspath(path))
    for cfg in (os.path.join(d, "pyvenv.cfg"), os.path.join(os.path.dirname(d), "pyvenv.cfg")):
        if os.path.isfile(cfg):
            return os.path.realpath(cfg)
    return None


def _is_our_python(path: str, python: str) -> bool:
    """Same binary *and* same environment: a venv's python is a link to the base interpreter,
    which (like any other link to it) starts without the venv's packages."""
    try:
        return os.path.realpath(path) == os.path.realpath(python) and _venv_of(path) == _venv_of(python)
    except OSError:
        return False


def _console_script(path: str, python: str) -> bool:
    """A launcher of ``python``'s environment (``#!/venv/bin/python`` + a few lines of Python)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(256)
    except OSError:
        return False
    if not head.startswith(b"#!"):
        return False
    interp = head[2:].split(b"\n", 1)[0].strip().split()
    return bool(interp) and len(interp) == 1 and _is_our_python(interp[0].decode(errors="replace"), python)


def _shell_syntax(command: str) -> bool:
    """True when a shell would do more with ``command`` than split it into words: a
    metacharacter outside quotes, or an expansion (``$``, backquote, backslash) inside double
    quotes. Inside single quotes everything is literal (``python -c 'print(1)'`` qualifies)."""
    quote = None
    for c in command:
        if quote == "'":
            quote = None if c == "'" else quote
        elif quote == '"':
            if c in '$`\\':
                return True
            quote = None if c == '"' else quote
        elif c in "'\"":
            quote = c
        elif c in _SHELL_CHARS:
            return True
    return False  # an unterminated quote is left to shlex, which refuses it


def python_spec(command: str, path_env: str, python: str) -> PythonSpec | None:
    """The invocation ``command`` makes of ``python``, or None when it is anything else."""
    if not command.strip() or _shell_syntax(command):
        return None
    try:
        argv = shlex.split(command)
    except ValueError:
        return None
    if not argv or "=" in argv[0]:
        return None
    exe = _which(argv[0], path_env)
    if exe is None:
        return None
    if _console_script(exe, python) and not _is_our_python(exe, python):
        return PythonSpec("script", exe, tuple(argv[1:]))
    if not _is_our_python(exe, python):
        return None
    unbuffered = False
    rest = argv[1:]
    while rest and rest[0] in _OPTIONS_OK:
        unbuffered = unbuffered or rest[0] == "-u"
        rest = rest[1:]
    if not rest:
        return None  # an interactive interpreter: nothing to gain
    head, tail = rest[0], tuple(rest[1:])
    if head in ("-m", "-c"):
        if not tail:
            return None
        return PythonSpec("module" if head == "-m" else "code", tail[0], tail[1:], unbuffered, argv[0])
    if head.startswith("-"):
        return None
    return PythonSpec("script", head, tail, unbuffered, argv[0])
