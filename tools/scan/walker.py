"""Finds the files to scan: .py files, .ipynb notebooks and the files that can set CUDA
environment variables (shell scripts, Dockerfiles, Makefiles, .env, YAML: ``tools.scan.envfiles``),
honouring .gitignore and skipping vendored/virtualenv folders."""

from __future__ import annotations

import logging
import os
import subprocess
from pathlib import Path

from tools.scan.envfiles import env_file_kind, kind_by_name, may_have_shebang
from tools.scan.gitignore import IgnoreRules

logger = logging.getLogger(__name__)

SUFFIXES = (".py", ".ipynb")
SKIP_DIRS = frozenset({
    ".git", ".hg", ".svn", ".venv", "venv", ".tox", ".nox", "site-packages", "dist-packages",
    "node_modules", "third_party", "third-party", "thirdparty", "vendor", "vendored", "_vendor", "__pycache__",
    ".mypy_cache", ".pytest_cache", ".ruff_cache", "build", "dist", ".eggs", ".ipynb_checkpoints", ".ferry",
})


def scannable(root: Path, rel: str) -> bool:
    """A Python/notebook file, or an env file (extensionless files: a shell shebang)."""
    if rel.endswith(SUFFIXES) or kind_by_name(rel) is not None:
        return True
    return may_have_shebang(rel) and env_file_kind(root, rel) is not None


def _skipped(rel: str) -> bool:
    parts = rel.split("/")[:-1]
    return any(p in SKIP_DIRS or p.endswith(".egg-info") for p in parts)


# The repository is not trusted: its .git/config can name commands git would run (core.fsmonitor,
# hooks, pagers...). Git reads only what these say: no system or global config, no fsmonitor or hooks.
_GIT = ["git", "-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null", "-c", "core.untrackedCache=false",
        "--no-pager"]


def _git_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL="/dev/null", GIT_TERMINAL_PROMPT="0")
    return env


def _git_files(root: Path) -> list[str] | None:
    try:
        env = _git_env()
        inside = subprocess.run([*_GIT, "-C", str(root), "rev-parse", "--is-inside-work-tree"],
                                capture_output=True, text=True, timeout=30, env=env)
        if inside.returncode != 0 or inside.stdout.strip() != "true":
            return None
        out = subprocess.run([*_GIT, "-C", str(root), "ls-files", "-z", "--cached", "--others",
                              "--exclude-standard", "--", "."],
                             capture_output=True, timeout=120, check=True, env=env)
    except (OSError, subprocess.SubprocessError) as exc:
        logger.info("git unavailable for %s (%s); using the built-in .gitignore matcher", root, exc)
        return None
    files = [p for p in out.stdout.decode("utf-8", "surrogateescape").split("\0") if p]
    return sorted(set(files))


def _walk(root: Path, respect_gitignore: bool) -> list[str]:
    rules = IgnoreRules()
    found: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        rel_dir = "" if here == root else here.relative_to(root).as_posix()
        if respect_gitignore and ".gitignore" in filenames:
            rules.add_file(here / ".gitignore", rel_dir)
        keep = []
        for d in sorted(dirnames):
            rel = f"{rel_dir}/{d}" if rel_dir else d
            if d in SKIP_DIRS or d.endswith(".egg-info") or (respect_gitignore and rules.ignored(rel, True)):
                continue
            if (here / d).is_symlink() or (here / d / "pyvenv.cfg").exists():
                continue
            keep.append(d)
        dirnames[:] = keep
        for name in sorted(filenames):
            rel = f"{rel_dir}/{name}" if rel_dir else name
            if respect_gitignore and rules.ignored(rel, False):
                continue
            found.append(rel)
    return found


def discover(root: Path, respect_gitignore: bool = True) -> list[str]:
    """Relative '/'-separated paths of the files to scan under ``root`` (a folder)."""
    files = _git_files(root) if respect_gitignore else None
    if files is None:
        files = _walk(root, respect_gitignore)
    return [f for f in files if not _skipped(f) and scannable(root, f) and (root / f).is_file()]
