"""The change Ferry made at a line a reviewer commented on, and that change undone at that line only.

``git blame`` of the commented commit says which commit wrote the line and by whom; when that is
Ferry's identity, the commit's diff gives the smallest change covering the line (``agent.chat.diffs``:
a replacement of as many lines as it removes is one change per line), and the scan of the file before
it says which catalogue rules matched there. Undoing it is a three-way merge (``git merge-file``) of
the branch's current file with the commit's file and the commit's file with that one change put back,
so commits pushed on top (a person's, Ferry's) are kept around it.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from pydantic import BaseModel, Field

from agent.chat.diffs import Hunk, changes_of, hunks_of
from agent.prbot.pr import gitops

_RULES_LINE = re.compile(r"^Rules: (.+)$", re.M)
_RULE_ID = re.compile(r"\bFRY\d{3}\b")


class FerrySite(BaseModel):
    """Ferry's change at a commented line."""

    path: str = Field(description="repository-relative")
    line: int = Field(description="the line in the commit Ferry wrote it in")
    commit: str = Field(description="Ferry's commit that wrote the line")
    subject: str
    change: Hunk = Field(description="the smallest change of that commit covering the line (no context)")
    rules: list[str] = Field(default_factory=list, description="the rules that made it (scan of the file before)")

    @property
    def old_text(self) -> list[str]:
        return [ln[1:] for ln in self.change.text.splitlines(keepends=True)[1:] if ln.startswith("-")]

    @property
    def where(self) -> str:
        lines = self.change.changed_new or [self.change.new_start]
        span = str(lines[0]) if len(lines) == 1 else f"{lines[0]}-{lines[-1]}"
        return f"{self.path} line {span}"


def blame(repo: Path, rev: str, path: str, line: int) -> tuple[str, int, str, str] | None:
    """(commit, its line number, its path, its author's e-mail) of ``line`` of ``path`` at ``rev``."""
    out = gitops.git(repo, "blame", "--porcelain", "-L", f"{line},{line}", rev, "--", path, check=False)
    lines = out.splitlines()
    if not lines or not re.fullmatch(r"[0-9a-f]{40} \d+ \d+( \d+)?", lines[0]):
        return None
    sha, orig, _ = lines[0].split(" ", 2)
    headers = dict(ln.split(" ", 1) for ln in lines[1:] if " " in ln and not ln.startswith("\t"))
    mail = headers.get("author-mail", "").strip("<>")
    return sha, int(orig), headers.get("filename", path), mail


def ferry_site(repo: Path, rev: str, path: str, line: int, ferry_email: str) -> FerrySite | None:
    """Ferry's change at ``line`` of ``path`` at ``rev``; None when someone else wrote that line (or git
    cannot tell)."""
    found = blame(repo, rev, path, line)
    if found is None:
        return None
    sha, orig, name, mail = found
    if mail.lower() != ferry_email.lower():
        return None
    parent = gitops.git(repo, "rev-parse", "--verify", "--quiet", f"{sha}^", check=False)
    if not parent:
        return None
    diff = gitops.git(repo, "diff", "--no-color", "--no-ext-diff", "-U3", parent, sha, "--", name, strip=False)
    for hunk in hunks_of(diff):
        if orig in hunk.changed_new:
            change = next((c for c in changes_of(hunk) if orig in c.changed_new), None)
            if change is None:
                return None
            message = gitops.git(repo, "log", "-1", "--format=%B", sha)
            rules = _rules_at(repo, parent, name, change) or _rules_of(message)
            return FerrySite(path=name, line=orig, commit=sha, subject=message.splitlines()[0] if message else "",
                             change=change, rules=rules)
    return None


def _rules_of(message: str) -> list[str]:
    """The rule ids a Ferry commit message lists (``Rules: FRY002 (docs/...), FRY013 (...)``)."""
    m = _RULES_LINE.search(message)
    return list(dict.fromkeys(_RULE_ID.findall(m.group(1)))) if m else []


def _rules_at(repo: Path, parent: str, path: str, change: Hunk) -> list[str]:
    """The catalogue rules the scan of ``path`` before the commit finds at the lines the change replaced."""
    from tools.scan.api import scan
    from tools.scan.models import ScanRequest

    if not change.changed_old:
        return []
    text = gitops.git(repo, "show", f"{parent}:{path}", strip=False, check=False)
    with tempfile.TemporaryDirectory(prefix="ferry-review-scan-") as tmp:
        target = Path(tmp) / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        report = scan(ScanRequest(path=Path(tmp), jobs=1, respect_gitignore=False))
    old = set(change.changed_old)
    return list(dict.fromkeys(f.rule_id for f in report.findings if f.file == path and f.line in old))


def undo_at(repo: Path, site: FerrySite, path_now: Path) -> bool:
    """Undo the site's change in ``path_now`` (the branch's current file in the work tree): True when the
    file changed, False when it holds the change undone already. GitError: the change cannot be undone
    there (the lines around it were changed since, a conflict)."""
    real = path_now.resolve()
    if path_now.is_symlink() or not real.is_relative_to(repo.resolve()) or not real.is_file():
        # a commit since made it (or a directory above it) a link: never read or write past the clone
        raise gitops.GitError(f"{site.path} is a symbolic link or not a file in the branch now; Ferry does not "
                              "follow links out of the repository")
    at_commit = gitops.git(repo, "show", f"{site.commit}:{site.path}", strip=False)
    lines = at_commit.splitlines(keepends=True)
    c = site.change
    start = c.new_start - 1  # where its new lines begin (where they would, for a deletion)
    undone = "".join(lines[:start] + site.old_text + lines[start + c.new_len:])
    current = path_now.read_text(encoding="utf-8")
    with tempfile.TemporaryDirectory(prefix="ferry-review-merge-") as tmp:
        ours, base, theirs = (Path(tmp) / n for n in ("current", "ferry", "undone"))
        ours.write_text(current, encoding="utf-8")
        base.write_text(at_commit, encoding="utf-8")
        theirs.write_text(undone, encoding="utf-8")
        merged = gitops.git(repo, "merge-file", "-p", "-L", "branch", "-L", "ferry", "-L", "undone",
                            str(ours), str(base), str(theirs), strip=False)
    if merged == current:
        return False
    path_now.write_text(merged, encoding="utf-8")
    return True
