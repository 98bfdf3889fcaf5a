"""The scan benchmark's real corpus: the real manifest's repositories, checked out of a mirror the way
the eval harness does it, their Python files only (benchmarks/scan.py; the timing itself is never tested)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import scan as bench


def _git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args], cwd=cwd,
                          check=True, capture_output=True, text=True).stdout.strip()


def _mirror(tmp_path: Path) -> tuple[Path, str]:
    """A mirror as the fetch tool writes it (mirror/owner+name/repo, a bare clone) of a small repository
    whose pinned commit differs from its newest one."""
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "train.py").write_text("import torch\nx = torch.zeros(1).cuda()\n")
    (src / "pkg" / "util.py").write_text("def f():\n    return 1\n\n\n")
    (src / "run.sh").write_text("CUDA_VISIBLE_DEVICES=0 python train.py\n")
    (src / "README.md").write_text("# proj\n")
    _git("init", "-q", cwd=src)
    _git("add", ".", cwd=src)
    _git("commit", "-q", "-m", "pinned", cwd=src)
    pinned = _git("rev-parse", "HEAD", cwd=src)
    (src / "later.py").write_text("print('after the pinned commit')\n")
    _git("add", ".", cwd=src)
    _git("commit", "-q", "-m", "later", cwd=src)
    mirror = tmp_path / "mirror"
    (mirror / "acme+proj").mkdir(parents=True)
    subprocess.run(["git", "clone", "-q", "--bare", str(src), str(mirror / "acme+proj" / "repo")], check=True)
    return mirror, pinned


def _manifest(tmp_path: Path, pinned: str) -> Path:
    case = 'name = "{name}"\nrepo = "{repo}"\ncommit = "{commit}"\nrun = "python train.py"\n'
    text = "\n".join("[[case]]\n" + case.format(name=n, repo=r, commit=c) for n, r, c in (
        ("one", "acme/proj", pinned), ("two", "acme/proj", pinned), ("gone", "acme/absent", "0" * 40)))
    path = tmp_path / "manifest.toml"
    path.write_text(text)
    return path


def test_real_corpus_holds_the_python_files_of_each_pinned_checkout_once(tmp_path: Path) -> None:
    mirror, pinned = _mirror(tmp_path)
    dest = tmp_path / "work" / "real"
    files, lines, missing = bench.real_corpus(dest, mirror, _manifest(tmp_path, pinned))
    copied = sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file())
    top = f"acme+proj@{pinned[:12]}"
    # the pinned commit's .py files only (no shell script, no README, nothing of the later commit),
    # once although two cases pin the same commit
    assert copied == [f"{top}/pkg/util.py", f"{top}/train.py"]
    assert (files, lines) == (2, 2 + 4)
    assert missing == ["acme/absent"]
    assert not (tmp_path / "work" / "checkouts").exists()  # the checkouts are gone, the corpus stays


def test_without_a_mirror_the_benchmark_says_what_is_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    absent = tmp_path / "no-mirror"
    monkeypatch.setattr(sys, "argv", ["scan.py", "--corpus", "real", "--mirror", str(absent),
                                      "--keep", str(tmp_path / "work")])
    assert bench.main() == 1
    err = capsys.readouterr().err
    assert f"real corpus skipped: no mirror of the real suite's repositories at {absent}" in err
    assert "nothing to time" in err
