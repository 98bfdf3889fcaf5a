"""A reviewer's edited diff, turned into the files an ``edit`` answer carries."""

from __future__ import annotations

import ast
import re
import subprocess
import tempfile
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from agent.migration.workspace import current_text
from tools.patch import git_apply

if TYPE_CHECKING:
    from agent.migration.facade import MigrationSnapshot

_TARGET = re.compile(r"^\+\+\+ ([^\t\n]+)", re.MULTILINE)


def _target_names(diff: str) -> list[str]:
    """The files a unified diff writes: each '+++' name to a tab or the line's end, git's C-quoted names
    ("b/na\\303\\257ve.py") unquoted, the b/ prefix dropped."""
    names: set[str] = set()
    for raw in _TARGET.findall(diff):
        name = raw.rstrip("\r")
        if name.startswith('"') and name.endswith('"') and len(name) >= 2:
            try:
                name = ast.literal_eval("b" + name).decode("utf-8")
            except (ValueError, SyntaxError, UnicodeDecodeError):
                raise ValueError(f"the diff names a file git could not have written: {name[:100]!r}") from None
        if name == "/dev/null":
            continue
        names.add(name[2:] if name.startswith("b/") else name)
    return sorted(names)


def files_from_diff(state: MigrationSnapshot, diff: str) -> dict[str, str]:
    """Apply ``diff`` to the files as the migration has them now (before the proposed edit); ValueError
    saying why when it names a path outside the repository or does not apply."""
    names = _target_names(diff)
    if not names:
        raise ValueError("the diff names no file ('+++ b/path' lines); send a unified diff of the repository")
    for name in names:
        p = PurePosixPath(name)
        if p.is_absolute() or ".." in p.parts:
            raise ValueError(f"the diff names {name!r}, outside the repository")
    source = Path(state.options.source)
    edited = state.files
    with tempfile.TemporaryDirectory(prefix="ferry-review-") as tmp:
        root = Path(tmp)
        for name in names:
            text = current_text(source, edited, name)
            if text is not None:
                (root / name).parent.mkdir(parents=True, exist_ok=True)
                (root / name).write_text(text, encoding="utf-8")
        try:
            git_apply(root, diff)
        except subprocess.CalledProcessError as exc:
            raise ValueError(f"the diff does not apply to the files as they are before the proposed edit: "
                             f"{(exc.stderr or '').strip()[:500]}") from None
        out: dict[str, str] = {}
        for name in names:
            target = root / name
            if target.is_symlink() or any(p.is_symlink() for p in target.parents if p != root and root in p.parents):
                raise ValueError(f"the diff makes {name!r} a symbolic link; send file contents only")
            if target.is_file():
                out[name] = target.read_text(encoding="utf-8")
        if not out:
            raise ValueError("the diff leaves no file to apply (it only deletes files); send the files' new text")
        return out
