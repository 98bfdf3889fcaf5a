"""The real suite: public repositories at pinned commits, taken from a local mirror of clones.

Nothing of their code is in this repository. ``prepare`` finds the repository in the mirror (a
clone or a bare git directory, named ``owner+name`` as the search tool's ``fetch`` writes it, or
``owner/name``), checks the pinned commit out into the case's work directory, checks the packages
it needs, and runs the data script of ours that writes what it would download.
"""

from __future__ import annotations

import logging
import subprocess
import sys
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


def _git(*args: str, cwd: Path | None = None) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RealCaseError(f"git {' '.join(args)} failed: {proc.stderr.strip()[-500:]}")
    return proc.stdout.strip()


def prepare(case: RealCase, mirror: Path | None, work: Path) -> Path:
    """A checkout of ``case`` at its pinned commit under ``work``, with its data written."""
    from evals.harness import packages_missing

    if mirror is None:
        raise RealCaseError("the real suite needs --mirror DIR")
    missing = packages_missing(case.packages)
    if missing:
        raise RealCaseError(f"{case.name} needs {', '.join(missing)}, not installed in Ferry's environment: "
                            f"{Path(sys.executable).parent / 'pip'} install {' '.join(missing)}",
                            status="failed_environment")
    clone = find_clone(mirror, case.repo_name)
    _git("clone", "--quiet", "--no-checkout", "--shared", str(clone), str(work))
    _git("-c", "advice.detachedHead=false", "checkout", "--quiet", case.commit, cwd=work)
    if case.data_script is not None:
        proc = subprocess.run([sys.executable, str(case.data_script)], cwd=work, capture_output=True, text=True,
                              timeout=600)
        if proc.returncode != 0:
            raise RealCaseError(f"the data script {case.data_script.name} failed: {proc.stderr.strip()[-500:]}")
    return work
