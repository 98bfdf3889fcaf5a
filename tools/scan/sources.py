"""Reading one file for the scan: size/binary/encoding checks and notebook code cells."""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tools import repofiles
from tools.codemods.prefilter import may_contain_idioms
from tools.scan.models import FileNote

_MAGIC = re.compile(r"^(\s*)([%!?])")
_CELL_MAGIC = re.compile(r"^%%([A-Za-z_][A-Za-z0-9_]*)")
#: cell magics whose body (every line after the magic line) is Python run in the kernel's namespace
PYTHON_BODY_MAGICS = frozenset({"time", "timeit", "capture", "prun", "memit", "debug"})


@dataclass
class Unit:
    """One piece of Python source: a whole .py file, or one notebook code cell."""

    text: str
    cell: int | None = None
    #: the cell magic line (``%%time``, ending as written) that ``text`` has as a comment on line 1
    cell_magic: str | None = None


@dataclass
class Loaded:
    units: list[Unit]
    raw_text: str | None = None
    note: FileNote | None = None
    notebook: dict[str, Any] | None = None  # the notebook's JSON, as written
    #: cells left out of the scan (a cell magic whose body is not Python) that mention CUDA, one note each
    notes: list[FileNote] = field(default_factory=list)


def cell_magic(source: str) -> str | None:
    """The cell magic's name (``time`` for ``%%time -n 3``), None for a cell without one."""
    first = source.splitlines()[0].lstrip() if source else ""
    if not first.startswith("%%"):
        return None
    m = _CELL_MAGIC.match(first)
    return m.group(1) if m else ""


def _neutralise_magics(source: str) -> str | None:
    """IPython magics/shell lines become comments (same line numbers); the magic line of a cell
    whose body is Python (``%%time``) too; None for the other cell magics (``%%bash``...)."""
    lines = source.splitlines(keepends=True)
    magic = cell_magic(source)
    if magic is not None and magic not in PYTHON_BODY_MAGICS:
        return None
    out = []
    for line in lines:
        m = _MAGIC.match(line)
        out.append(f"{m.group(1)}#{line[len(m.group(1)):]}" if m else line)
    return "".join(out)


def top_level_imports(source: str) -> dict[str, str]:
    """The names a cell's top-level imports bind, each with what it means (``nn`` -> ``torch.nn``);
    relative and star imports are left out, as is a cell that does not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError):
        return {}
    names: dict[str, str] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Import):
            for alias in stmt.names:
                if alias.asname:
                    names[alias.asname] = alias.name
                else:
                    head = alias.name.split(".", 1)[0]
                    names[head] = head
        elif isinstance(stmt, ast.ImportFrom) and stmt.module and not stmt.level:
            for alias in stmt.names:
                if alias.name != "*":
                    names[alias.asname or alias.name] = f"{stmt.module}.{alias.name}"
    return names


def cell_source(cell: dict[str, Any]) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else str(src)


def load(path: Path, rel: str, max_bytes: int) -> Loaded:
    """``path`` (``rel`` in the repository) read by :mod:`tools.repofiles`: a link, a FIFO or a device is a
    note, never opened or followed."""
    posix = path.as_posix()
    # from the repository's root when ``path`` is root/rel: no link is followed on the way either
    base, name = (Path(posix[: -len(rel) - 1]), rel) if posix.endswith("/" + rel) else (path.parent, path.name)
    try:
        data = repofiles.read_bytes(base, name, max_bytes=max_bytes)
    except repofiles.RepoFileError as exc:
        if exc.kind == "too_large":
            return Loaded([], note=FileNote(file=rel, kind="skipped_size",
                                            message=f"{exc.reason} (raise --max-file-bytes)"))
        return Loaded([], note=FileNote(file=rel, kind="error", message=f"cannot read: {exc.reason}"))
    if b"\0" in data[:8192]:
        return Loaded([], note=FileNote(file=rel, kind="skipped_binary", message="binary content (NUL bytes)"))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return Loaded([], note=FileNote(file=rel, kind="skipped_encoding",
                                        message=f"not UTF-8 (byte {exc.start}); re-encode the file as UTF-8"))
    if not rel.endswith(".ipynb"):
        return Loaded([Unit(text)], raw_text=text)
    try:
        nb = json.loads(text)
        cells = nb["cells"]
    except (ValueError, KeyError, TypeError) as exc:
        return Loaded([], note=FileNote(file=rel, kind="parse_error", message=f"not a notebook: {exc}"))
    units = []
    notes = []
    for index, cell in enumerate(cells):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        source = cell_source(cell)
        src = _neutralise_magics(source)
        if src is None:
            if not may_contain_idioms(source):  # nothing CUDA-like in it: nothing to say
                continue
            first = source.splitlines()[0].strip()[:60]
            notes.append(FileNote(file=rel, kind="skipped_notebook", line=1,
                                  message=f"cell {index} ({first!r}) is not Python: not scanned and left "
                                          "unchanged; review it by hand if it uses CUDA"))
            continue
        magic_line = source.splitlines(keepends=True)[0] if cell_magic(source) is not None else None
        units.append(Unit(src, cell=index, cell_magic=magic_line))
    return Loaded(units, raw_text=text, notebook=nb, notes=notes)


def restore_magics(original: str, neutral: str, rewritten: str, cell_magic: str | None = None) -> str:
    """Turn the magics we commented out back into magics in the rewritten cell; a cell magic's
    line (``%%time``, ``cell_magic`` as written) goes back to line 1, wherever the rewrite left its
    comment (a statement inserted at the top of the cell)."""
    # neutral is original with some lines commented out, line for line (sources._neutralise_magics)
    pairs = [(n, o) for o, n in zip(original.splitlines(keepends=True), neutral.splitlines(keepends=True),
                                    strict=True) if o != n]
    out = rewritten.splitlines(keepends=True)
    if cell_magic is not None and pairs:
        first, pairs = pairs[0], pairs[1:]
        if first[0] in out:
            out.remove(first[0])
        elif out and first[0].rstrip("\r\n") == out[-1].rstrip("\r\n"):  # the last line, its newline lost
            out.pop()
        out.insert(0, cell_magic)
    for n, o in pairs:
        for i, line in enumerate(out):
            if line == n:
                out[i] = o
                break
    return "".join(out)


def dump_notebook(nb: dict[str, Any], raw_text: str) -> str:
    """The notebook's JSON as Jupyter writes it, indented as ``raw_text`` (the file read) was."""
    indent = 1 if '\n "' in raw_text[:200] else 2
    return json.dumps(nb, indent=indent, ensure_ascii=False) + "\n"


def edit_code_cell(text: str, edit: Callable[[str], str | None]) -> tuple[str, int] | None:
    """``edit`` applied to the notebook's code cells in order, each as the Python the scan sees
    (magics as comments; cells of other cell magics are not offered), until one returns a changed
    cell: the notebook's new JSON (that cell's magics restored) and the cell's index. None when
    ``text`` is not a notebook or no cell changed."""
    try:
        nb = json.loads(text)
        cells = nb["cells"]
    except (ValueError, KeyError, TypeError):
        return None
    if not isinstance(cells, list):
        return None
    for index, cell in enumerate(cells):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        try:
            source = cell_source(cell)
        except TypeError:  # a source list holding something other than strings
            continue
        neutral = _neutralise_magics(source)
        new = edit(neutral) if neutral is not None else None
        if neutral is None or new is None or new == neutral:
            continue
        magic = source.splitlines(keepends=True)[0] if cell_magic(source) is not None else None
        cell["source"] = restore_magics(source, neutral, new, magic).splitlines(keepends=True)
        return dump_notebook(nb, text), index
    return None
