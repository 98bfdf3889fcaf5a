"""Unified diffs that ``git apply`` accepts (a/ b/ prefixes, no-newline markers)."""

from __future__ import annotations

import difflib


def unified_diff(rel: str, before: str, after: str) -> str:
    if before == after:
        return ""
    a = before.splitlines(keepends=True)
    b = after.splitlines(keepends=True)
    out = [f"diff --git a/{rel} b/{rel}\n"]
    for line in difflib.unified_diff(a, b, fromfile=f"a/{rel}", tofile=f"b/{rel}", n=3):
        if not line.endswith("\n"):
            line += "\n\\ No newline at end of file\n"
        out.append(line)
    return "".join(out)
