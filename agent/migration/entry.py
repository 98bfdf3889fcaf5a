"""Which repository file a run command starts: the entry file policy rules edit (the matmul
precision fix sets its precision there, at the program's start).

Real commands are not always ``python train.py``: ``cd tutorials/lm && python main.py``,
``PYTHONPATH=. python -u scripts/train.py``, ``python -m projects.adder.adder``,
``torchrun --nproc_per_node=2 train.py``, ``python -m torch.distributed.run ... train.py``. The
command is read as the shell would split it (``&&``, ``;``, ``|``), following ``cd`` so that a
script is found relative to the directory it runs in.
"""

from __future__ import annotations

import posixpath
import re
import shlex

_SEPARATORS = frozenset({"&&", "||", ";", "|", "&", ";;"})
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
# `python -m X` of these runs no program of the repository's own (its tests, a profiler...).
_TOOL_MODULES = frozenset({"pytest", "unittest", "doctest", "pdb", "cProfile", "profile", "timeit", "pip"})


def _segments(command: str) -> list[list[str]]:
    lex = shlex.shlex(command, posix=True, punctuation_chars=";&|")
    lex.whitespace_split = True
    segments: list[list[str]] = [[]]
    for tok in lex:
        if tok in _SEPARATORS:
            segments.append([])
        else:
            segments[-1].append(tok)
    return [s for s in segments if s]


def _inside(cwd: str, path: str) -> str | None:
    """``path`` (relative to ``cwd``, itself relative to the repository) as a repository path, or
    None when it leaves the repository or is absolute."""
    if path.startswith(("/", "~")):
        return None
    joined = posixpath.normpath(posixpath.join(cwd, path)) if cwd else posixpath.normpath(path)
    return None if joined == ".." or joined.startswith("../") else joined


def _module_file(cwd: str, module: str, known: set[str]) -> str | None:
    rel = module.replace(".", "/")
    for base in dict.fromkeys([cwd, ""]):  # sys.path[0] is the working directory
        for cand in (f"{rel}.py", f"{rel}/__main__.py"):
            path = _inside(base, cand)
            if path is not None and path in known:
                return path
    return None


def entry_file(command: str, known: list[str], start: str | None = None) -> str | None:
    """The repository file (relative path, one of ``known``) that ``command`` runs first, or None
    (``python -c``, a tool such as pytest, a script outside the repository, a command not parsed).
    ``start``: the directory the command starts in, relative to the repository (``--cwd``)."""
    try:
        segments = _segments(command)
    except ValueError:
        return None
    files = set(known)
    cwd = (_inside("", start) or "") if start else ""
    if cwd == ".":
        cwd = ""
    for seg in segments:
        while seg and _ASSIGNMENT.match(seg[0]):
            seg = seg[1:]
        if not seg:
            continue
        if seg[0] == "cd":
            if len(seg) < 2:
                return None
            new = _inside(cwd, seg[1])
            if new is None:
                return None
            cwd = "" if new == "." else new
            continue
        found = _entry_in(seg, cwd, files)
        if found is not None:
            return found or None
    return None


def _entry_in(seg: list[str], cwd: str, files: set[str]) -> str | None:
    """The entry of one simple command; "" when it certainly runs none of the repository's files,
    None when it names none (look at the next command)."""
    for i, tok in enumerate(seg):
        if tok == "-c" and i > 0 and posixpath.basename(seg[0]).startswith("python"):
            return ""
        if tok == "-m" and i + 1 < len(seg):
            module = seg[i + 1]
            if module.split(".")[0] in _TOOL_MODULES:
                return ""
            hit = _module_file(cwd, module, files)
            if hit is not None:
                return hit
            continue  # a launcher module (torch.distributed.run): its script comes later
        if tok.endswith(".py"):
            path = _inside(cwd, tok)
            if path is not None and path in files:
                return path
    return None


def notebooks_named(command: str, known: list[str], start: str | None = None) -> list[str]:
    """The repository's notebooks (``.ipynb``, among ``known``) that ``command`` names as arguments,
    in order: a notebook runner's (``python run_notebook.py nb.ipynb``, ``papermill nb.ipynb out.ipynb``)
    program lives in the notebook, not in the entry file. Paths are read as ``entry_file`` reads them."""
    try:
        segments = _segments(command)
    except ValueError:
        return []
    files = set(known)
    cwd = (_inside("", start) or "") if start else ""
    cwd = "" if cwd == "." else cwd
    found: list[str] = []
    for seg in segments:
        if seg[0] == "cd":
            new = _inside(cwd, seg[1]) if len(seg) > 1 else None
            if new is None:
                return found
            cwd = "" if new == "." else new
            continue
        for tok in seg:
            path = _inside(cwd, tok) if tok.endswith(".ipynb") else None
            if path is not None and path in files and path not in found:
                found.append(path)
    return found
