"""Reading one file for the scan: size/binary/encoding checks and notebook code cells."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools.scan.models import FileNote

_MAGIC = re.compile(r"^(\s*)([%!?])")


@dataclass
class Unit:
    """One piece of Python source: a whole .py file, or one notebook code cell."""

    text: str
    cell: int | None = None


@dataclass
class Loaded:
    units: list[Unit]
    raw_text: str | None = None
    note: FileNote | None = None
    notebook: dict[str, Any] | None = None  # the notebook's JSON, as written


def _neutralise_magics(source: str) -> str | None:
    """IPython magics/shell lines become comments (same line numbers); None for cell magics."""
    lines = source.splitlines(keepends=True)
    if lines and lines[0].lstrip().startswith("%%"):
        return None
    out = []
    for line in lines:
        m = _MAGIC.match(line)
        out.append(f"{m.group(1)}#{line[len(m.group(1)):]}" if m else line)
    return "".join(out)


def cell_source(cell: dict[str, Any]) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else str(src)


def load(path: Path, rel: str, max_bytes: int) -> Loaded:
    try:
        size = path.stat().st_size
        if size > max_bytes:
            return Loaded([], note=FileNote(file=rel, kind="skipped_size",
                                            message=f"{size} bytes > limit {max_bytes} (raise --max-file-bytes)"))
        data = path.read_bytes()
    except OSError as exc:
        return Loaded([], note=FileNote(file=rel, kind="error", message=f"cannot read: {exc}"))
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
    for index, cell in enumerate(cells):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        src = _neutralise_magics(cell_source(cell))
        if src is not None:
            units.append(Unit(src, cell=index))
    return Loaded(units, raw_text=text, notebook=nb)
