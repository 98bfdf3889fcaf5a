"""The hunks of an edit's unified diff, and which edits changed a given line (for the chat's "why line 40?")."""

from __future__ import annotations

import re

from pydantic import BaseModel

from agent.migration import records

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_FILE = re.compile(r"^\+\+\+ (?:b/)?(.+)$")


class Hunk(BaseModel):
    """One ``@@`` hunk of a file's diff: its ranges in the old and the new text, and its lines."""

    file: str
    old_start: int
    old_len: int
    new_start: int
    new_len: int
    text: str
    changed_new: list[int]  # line numbers (new text) of the added lines
    changed_old: list[int]  # line numbers (old text) of the removed lines

    def covers(self, line: int) -> bool:
        """Whether ``line`` (of the migrated or of the original text) is inside this hunk."""
        return (self.new_start <= line < self.new_start + max(self.new_len, 1)
                or self.old_start <= line < self.old_start + max(self.old_len, 1))


def hunks_of(diff: str) -> list[Hunk]:
    """The hunks of a (possibly multi-file) unified diff; a hunk's body is counted by its header's lengths,
    so a body line that looks like a header (``+++ x``) stays in the hunk."""
    out: list[Hunk] = []
    file = ""
    lines = diff.splitlines(keepends=True)
    i = 0
    while i < len(lines):
        raw = lines[i]
        i += 1
        m_file = _FILE.match(raw.rstrip("\r\n"))
        if m_file:
            file = m_file.group(1).strip()
            continue
        m = _HUNK.match(raw)
        if not m:
            continue
        old_start, new_start = int(m.group(1)), int(m.group(3))
        old_len = int(m.group(2)) if m.group(2) is not None else 1
        new_len = int(m.group(4)) if m.group(4) is not None else 1
        body, added, removed = [raw], [], []
        old_no, new_no, old_left, new_left = old_start, new_start, old_len, new_len
        while i < len(lines) and (old_left > 0 or new_left > 0 or lines[i].startswith("\\")):
            line = lines[i]
            i += 1
            body.append(line)
            if line.startswith("+"):
                added.append(new_no)
                new_no, new_left = new_no + 1, new_left - 1
            elif line.startswith("-"):
                removed.append(old_no)
                old_no, old_left = old_no + 1, old_left - 1
            elif not line.startswith("\\"):
                old_no, new_no, old_left, new_left = old_no + 1, new_no + 1, old_left - 1, new_left - 1
        out.append(Hunk(file=file, old_start=old_start, old_len=old_len, new_start=new_start, new_len=new_len,
                        text="".join(body), changed_new=added, changed_old=removed))
    return out


def _same_file(name: str, wanted: str) -> bool:
    return name == wanted or name.endswith("/" + wanted) or wanted.endswith("/" + name)


def edits_covering(edits: list[records.Edit], line: int, file: str | None) -> list[tuple[records.Edit, list[Hunk]]]:
    """The edits whose diff has a hunk covering ``line`` (of ``file`` when given), with those hunks; the
    edits that changed that very line when some did (a hunk's context lines reach three lines further)."""
    covering = []
    for edit in edits:
        hunks = [h for h in hunks_of(edit.diff) if h.covers(line) and (file is None or _same_file(h.file, file))]
        if hunks:
            covering.append((edit, hunks))
    exact = [(e, hs) for e, hs in covering if any(line in h.changed_new or line in h.changed_old for h in hs)]
    return exact or covering


def edited_lines(edits: list[records.Edit]) -> dict[str, list[int]]:
    """file -> the line numbers (of the migrated text) the edits added or changed, sorted."""
    out: dict[str, set[int]] = {}
    for edit in edits:
        for h in hunks_of(edit.diff):
            out.setdefault(h.file, set()).update(h.changed_new or [h.new_start])
    return {f: sorted(ns) for f, ns in sorted(out.items())}


def changes_of(hunk: Hunk) -> list[Hunk]:
    """The hunk cut into its smallest changes, without context: each run of removed/added lines, and a
    run that replaces as many lines as it removes cut line by line (one codemod's change per line)."""
    body = hunk.text.splitlines(keepends=True)[1:]
    out: list[Hunk] = []
    old_no, new_no = hunk.old_start, hunk.new_start
    removed: list[str] = []
    added: list[str] = []

    def flush() -> None:
        nonlocal removed, added
        if not removed and not added:
            return
        pairs = ([([r], [a]) for r, a in zip(removed, added, strict=True)] if len(removed) == len(added)
                 else [(removed, added)])
        o, n = old_no - len(removed), new_no - len(added)
        for rem, add in pairs:
            header = (f"@@ -{o if rem else o - 1},{len(rem)} +{n if add else n - 1},{len(add)} @@\n")
            out.append(Hunk(file=hunk.file, old_start=o, old_len=len(rem), new_start=n, new_len=len(add),
                            text=header + "".join(rem) + "".join(add),
                            changed_new=list(range(n, n + len(add))), changed_old=list(range(o, o + len(rem)))))
            o, n = o + len(rem), n + len(add)
        removed, added = [], []

    for line in body:
        if line.startswith("\\"):
            continue
        if line.startswith("-"):
            if added:
                flush()
            removed.append(line)
            old_no += 1
        elif line.startswith("+"):
            added.append(line)
            new_no += 1
        else:
            flush()
            old_no, new_no = old_no + 1, new_no + 1
    flush()
    return out
