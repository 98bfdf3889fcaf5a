"""The real suite's checkout from a mirror that lacks some blobs (the fetch tool leaves a repository's
largest files out): everything else is checked out and the absent paths are named, instead of the
whole case failing in `git checkout`; the shipped manifest is valid."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from evals.cases import REAL_MANIFEST, load_real
from evals.real_suite import RealCaseError, checkout, find_clone


def _git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                          capture_output=True, text=True).stdout.strip()


@pytest.fixture
def mirror(tmp_path: Path) -> tuple[Path, str]:
    """A mirror ``owner+name/repo`` (bare) whose commit lacks the blobs of two of its files."""
    src = tmp_path / "src"
    (src / "data").mkdir(parents=True)
    (src / "train.py").write_text("print('hi')\n")
    (src / "data" / "big.txt").write_text("a large file the fetch left out\n")
    (src / "data" / "we ird[1].txt").write_text("another one, with glob characters in its name\n")
    (src / "data" / "weird1.txt").write_text("kept: a pattern for the name above must not match this one\n")
    _git("init", "-q", cwd=src)
    _git("add", "-A", cwd=src)
    _git("commit", "-q", "-m", "c", cwd=src)
    commit = _git("rev-parse", "HEAD", cwd=src)
    bare = tmp_path / "mirror" / "owner+name" / "repo"
    _git("clone", "-q", "--bare", "--no-local", str(src), str(bare), cwd=tmp_path)
    # unpack, then drop the two blobs, as a fetch that leaves large files out does
    for pack in (bare / "objects" / "pack").glob("*.pack"):
        moved = pack.rename(tmp_path / pack.name)  # unpack-objects skips what the repo already holds
        pack.with_suffix(".idx").unlink()
        with moved.open("rb") as f:
            subprocess.run(["git", "unpack-objects", "-q"], cwd=bare, stdin=f, check=True)
    for name in ("data/big.txt", "data/we ird[1].txt"):
        oid = _git("rev-parse", f"{commit}:{name}", cwd=src)
        (bare / "objects" / oid[:2] / oid[2:]).unlink()
    return tmp_path / "mirror", commit


def test_a_commit_with_absent_blobs_is_checked_out_without_them(mirror: tuple[Path, str], tmp_path: Path) -> None:
    root, commit = mirror
    work = tmp_path / "checkout"
    absent = checkout(find_clone(root, "owner/name"), commit, work)
    assert absent == ["data/big.txt", "data/we ird[1].txt"]
    assert (work / "train.py").read_text() == "print('hi')\n"
    assert (work / "data" / "weird1.txt").is_file()
    assert not (work / "data" / "big.txt").exists()
    assert not (work / "data" / "we ird[1].txt").exists()
    # the index agrees with the work tree (a plain checkout leaves them as deletions: ' D data/big.txt')
    assert _git("status", "--porcelain", cwd=work) == ""


def test_an_unknown_commit_is_a_clear_error(mirror: tuple[Path, str], tmp_path: Path) -> None:
    root, _ = mirror
    with pytest.raises(RealCaseError, match="git ls-tree"):
        checkout(find_clone(root, "owner/name"), "0" * 40, tmp_path / "checkout")


def test_the_shipped_manifest_is_valid() -> None:
    suite = load_real(REAL_MANIFEST)
    assert len(suite.cases) >= 8
    assert all(c.data_script is None or c.data_script.is_file() for c in suite.cases)
