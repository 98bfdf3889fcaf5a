"""What a pull request may say to the repository's readers: paths relative to the repository, not to
the sandbox, worktree or workspace a run used on this machine. (Which documentation it links, only
pages under docs/ that ship with Ferry, is held where the texts are written: tests/agent/test_shipped_doc_links.py.)

Run-derived text (a summary quoting a traceback, an edit's reason) passes through ``public_text``
before it lands in pr.md or a commit message.
"""

from __future__ import annotations

import re

from tools import doclinks

#: a path character in run output (stops at quotes, brackets, spaces and Markdown/table syntax)
_P = r"[^\s'\"`()\[\]<>|,;:]"
_S = r"[^/\s'\"`()\[\]<>|,;:]"  # ... within one path segment
#: a run's private copy: ``.../ferry-ws-XXXX/<the migrated directory's name>`` (sandbox.workspace, the runner's
#: kept workspaces, and inside bubblewrap under ``/tmp/ferry-space-.../ws/``)
_WORKSPACE = re.compile(rf"(?:/{_P}*)?/ferry-ws-[A-Za-z0-9_]+/{_S}+(?P<slash>/)?")
#: ``ferry pr``'s own temporary worktree: ``.../ferry-pr-wt-XXXX/<the repository's name>``
_WORKTREE = re.compile(rf"(?:/{_P}*)?/ferry-pr-wt-[A-Za-z0-9_]+/{_S}+(?P<slash>/)?")

_RULE = re.compile(r"^FRY\d{3}$")


def rule_doc(rule: str) -> str | None:
    """Where Ferry's docs describe a catalogue rule: ``docs/idioms.md#fry013``; None for a policy rule."""
    return doclinks.idiom(rule) if _RULE.match(rule) else None


def public_text(text: str, directory: str = "") -> str:
    """``text`` with this machine's run paths made repository-relative (``directory``: the migrated
    directory, relative to the repository; "" for its root)."""
    prefix = f"{directory.strip('/')}/" if directory.strip("/") else ""

    def rel(m: re.Match[str]) -> str:
        return prefix if m.group("slash") else (prefix.rstrip("/") or ".")

    text = _WORKSPACE.sub(rel, text)
    text = _WORKTREE.sub(lambda m: "" if m.group("slash") else ".", text)
    return text
