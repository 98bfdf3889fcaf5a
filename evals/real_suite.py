"""The real suite: public repositories at pinned commits, taken from a local mirror of clones.

Nothing of their code is in this repository. ``prepare`` finds the repository in the mirror (a
clone or a bare git directory, named ``owner+name`` as the search tool's ``fetch`` writes it, or
``owner/name``), checks the pinned commit out into the case's work directory, checks the packages
it needs, and runs the data script of ours that writes what it would download.

A mirror may lack some blobs: the search tool's ``fetch`` leaves a repository's largest files out
(``git ls-tree -l`` shows their size as ``BAD``), and a plain checkout of such a commit fails on the
first one. Those paths are left out of the checkout (a sparse checkout of everything else) and named
in the log; where the case needs one, its data script writes a synthetic stand-in.

Each case runs with an interpreter of its own, as the repository's users have one (``evals.real_env``):
a cached venv holding torch==2.13.0 and the repository's requirements, nothing of Ferry's. The data
script runs with it too (it may run the repository's own preparation code), and the migration gets it
as ``--python``.
"""

from __future__ import annotations

import logging
import os
import subprocess
from pathlib import Path

from evals.cases import RealCase

logger = logging.getLogger(__name__)


class RealCaseError(RuntimeError):
    """The real case cannot be prepared; ``status`` says how it counts."""

    def __init__(self, message: str, status: str = "failed_harness") -> None:
        super().__init__(message)
        self.status = status


def find_clone(mirror: Path, repo: str) -> Path:
    owner, name = repo.split("/", 1)
    for cand in (mirror / f"{owner}+{name}", mirror / owner / name, mirror / name):
        if cand.is_dir():
            # the fetch tool's mirror holds the git directory one level down
            inner = [p for p in cand.iterdir() if p.is_dir() and (p / "HEAD").is_file()]
            return inner[0] if (not (cand / "HEAD").is_file() and not (cand / ".git").exists() and inner) else cand
    raise RealCaseError(f"{repo} is not in the mirror {mirror} (looked for {owner}+{name}, {owner}/{name}); fetch it "
                        "there first (docs/evals.md)")


def _git(*args: str, cwd: Path | None = None, stdin: str | None = None) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, input=stdin)
    if proc.returncode != 0:
        raise RealCaseError(f"git {' '.join(args)} failed: {proc.stderr.strip()[-500:]}")
    return proc.stdout.strip()


def absent_files(work: Path, commit: str) -> list[str]:
    """The paths of ``commit`` whose blobs the clone at ``work`` does not hold (left out by the fetch)."""
    listing = _git("ls-tree", "-r", "-z", "--full-tree", commit, cwd=work)
    blobs: dict[str, list[str]] = {}
    for entry in listing.split("\0"):
        meta, sep, path = entry.partition("\t")
        fields = meta.split()
        if sep and len(fields) == 3 and fields[1] == "blob":
            blobs.setdefault(fields[2], []).append(path)
    if not blobs:
        return []
    checked = _git("cat-file", "--batch-check=%(objectname) %(objecttype)", cwd=work, stdin="\n".join(blobs) + "\n")
    missing = [line.split()[0] for line in checked.splitlines() if line.endswith(" missing")]
    return sorted(p for oid in missing for p in blobs.get(oid, []))


_GLOB_SPECIALS = "\\*?[!# "


def _literal_pattern(path: str) -> str:
    """A gitignore-style pattern matching exactly ``path`` from the top (specials escaped)."""
    return "/" + "".join("\\" + c if c in _GLOB_SPECIALS else c for c in path)


def checkout(clone: Path, commit: str, work: Path) -> list[str]:
    """Check ``commit`` out of ``clone`` into ``work``; the paths left out because the clone lacks them."""
    _git("clone", "--quiet", "--no-checkout", "--shared", str(clone), str(work))
    absent = absent_files(work, commit)
    if absent:
        logger.warning("the mirror's %s lacks %d file(s) of %s, left out of the checkout: %s", clone, len(absent),
                       commit[:12], ", ".join(absent))
        _git("sparse-checkout", "set", "--no-cone", "--stdin", cwd=work,
             stdin="\n".join(["/*", *("!" + _literal_pattern(p) for p in absent)]) + "\n")
    _git("-c", "advice.detachedHead=false", "checkout", "--quiet", commit, cwd=work)
    return absent


def prepare(case: RealCase, mirror: Path | None, work: Path) -> tuple[Path, Path]:
    """A checkout of ``case`` at its pinned commit under ``work``, with its data written, and the
    interpreter its runs use (the case's own venv)."""
    from evals.real_env import VenvError, case_python, requirements_of

    if mirror is None:
        raise RealCaseError("the real suite needs --mirror DIR")
    clone = find_clone(mirror, case.repo_name)
    checkout(clone, case.commit, work)
    try:
        python = case_python(requirements_of(case.packages, work, case.requirements))
    except VenvError as exc:
        raise RealCaseError(f"{case.name}: {exc}", status="failed_environment") from None
    if case.data_script is not None:
        proc = subprocess.run([str(python), str(case.data_script)], cwd=work, capture_output=True, text=True,
                              timeout=600, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
        if proc.returncode != 0:
            raise RealCaseError(f"the data script {case.data_script.name} failed: {proc.stderr.strip()[-500:]}")
    return work, python
