"""What a pull request may say to the repository's readers: paths relative to the repository, not to
the sandbox, worktree or workspace a run used on this machine; and Ferry's shipped documentation
(docs/idioms.md, docs/numerics.md, docs/design.md), not the design documents a user does not have.

Run-derived text (a summary quoting a traceback, an edit's reason) passes through ``public_text``
before it lands in pr.md or a commit message.
"""

from __future__ import annotations

import re

#: a path character in run output (stops at quotes, brackets, spaces and Markdown/table syntax)
_P = r"[^\s'\"`()\[\]<>|,;:]"
_S = r"[^/\s'\"`()\[\]<>|,;:]"  # ... within one path segment
#: a run's private copy: ``.../ferry-ws-XXXX/<the migrated directory's name>`` (sandbox.workspace, the runner's
#: kept workspaces, and inside bubblewrap under ``/tmp/ferry-space-.../ws/``)
_WORKSPACE = re.compile(rf"(?:/{_P}*)?/ferry-ws-[A-Za-z0-9_]+/{_S}+(?P<slash>/)?")
#: ``ferry pr``'s own temporary worktree: ``.../ferry-pr-wt-XXXX/<the repository's name>``
_WORKTREE = re.compile(rf"(?:/{_P}*)?/ferry-pr-wt-[A-Za-z0-9_]+/{_S}+(?P<slash>/)?")

#: the design documents' names -> the page of Ferry's docs that says it to users
_DOCS = [
    (re.compile(r"\b(?:docs/)?CUDA_IDIOMS(?:\.md)?(?: (?P<n>\d+(?:[-/,] ?\d+)*))?"), "docs/idioms.md"),
    (re.compile(r"\b(?:docs/)?NUMERICS\.md\b"), "docs/numerics.md"),
    (re.compile(r"\bNUMERICS(?= fp32| tiers?\b)"), "docs/numerics.md"),
    (re.compile(r"\b(?:docs/)?DESIGN\.md\b"), "docs/design.md"),
]
_RULE = re.compile(r"^FRY\d{3}$")


def rule_doc(rule: str) -> str | None:
    """Where Ferry's docs describe a catalogue rule: ``docs/idioms.md#fry013``; None for a policy rule."""
    return f"docs/idioms.md#{rule.lower()}" if _RULE.match(rule) else None


def public_text(text: str, directory: str = "") -> str:
    """``text`` with this machine's run paths made repository-relative (``directory``: the migrated
    directory, relative to the repository; "" for its root) and design-document names replaced by
    Ferry's docs pages."""
    prefix = f"{directory.strip('/')}/" if directory.strip("/") else ""

    def rel(m: re.Match[str]) -> str:
        return prefix if m.group("slash") else (prefix.rstrip("/") or ".")

    text = _WORKSPACE.sub(rel, text)
    text = _WORKTREE.sub(lambda m: "" if m.group("slash") else ".", text)
    for pattern, page in _DOCS:
        text = pattern.sub(page, text)
    return text
