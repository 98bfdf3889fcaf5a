"""A repository holding a FIFO named ``x.py``, a symlink ``y.py -> /etc/passwd`` (and one through a linked
directory) and a huge ``.py``: every reader of it goes through tools/repofiles.py, so `ferry run`, `ferry
migrate` and `ferry scan` finish (never block on the FIFO), skip the FIFO with a warning, and never read
through the links."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROG = 'import torch\n\nx = torch.ones(3).cuda()\nprint("sum", float((x * 2).sum()))\n'
HUGE = 3_000_000


def _hostile_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "prog.py").write_text(PROG)
    os.mkfifo(repo / "x.py")
    os.mkfifo(repo / "pkg" / ".gitignore")
    os.mkfifo(repo / "run")  # an extensionless file: the scan reads its first bytes for a shebang
    (repo / "y.py").symlink_to("/etc/passwd")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.py").write_text("import hypothesis  # outside the repository\n")
    (repo / "linked").symlink_to(tmp_path / "outside")
    with open(repo / "big.py", "wb") as fh:
        fh.truncate(HUGE)  # sparse: 3 MB of NULs
    return repo


def _ferry(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    # the point is no hang: a FIFO opened for reading blocks until a writer comes, which never does
    return subprocess.run([sys.executable, "-m", "agent.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=240, env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_ferry_run_of_a_repository_with_a_fifo_finishes_and_says_it_skipped_it(tmp_path):
    repo = _hostile_repo(tmp_path)
    r = _ferry("run", str(repo), "--artifacts", str(tmp_path / "art"), "--redirect-cuda", "cpu", "--",
               "python", "prog.py", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "x.py" in r.stderr and "FIFO" in r.stderr  # skipped, with a warning
    assert "root:" not in r.stdout + r.stderr


def test_ferry_migrate_of_a_repository_with_a_fifo_finishes(tmp_path):
    repo = _hostile_repo(tmp_path)
    out = tmp_path / "out"
    r = _ferry("migrate", str(repo), "--run", "python prog.py", "--offline", "--out", str(out), "--state-dir",
               str(tmp_path / "state"), "--max-iterations", "2", cwd=tmp_path)
    assert r.returncode in (0, 1), r.stderr[-3000:]
    assert "Traceback" not in r.stderr
    assert "x.py" in r.stderr and "FIFO" in r.stderr
    patch = (out / "ferry.patch").read_text()
    assert "prog.py" in patch and "x.py" not in patch and "y.py" not in patch and "root:" not in patch


def test_ferry_scan_skips_them_too(tmp_path):
    repo = _hostile_repo(tmp_path)
    r = _ferry("scan", str(repo), "--json", "--jobs", "1", cwd=tmp_path)
    assert r.returncode in (0, 1), r.stderr[-3000:]
    assert "prog.py" in r.stdout and "root:" not in r.stdout and "secret.py" not in r.stdout


# --- the reader itself ----------------------------------------------------------------------


def test_the_reader_reads_regular_files_and_refuses_the_rest(tmp_path):
    from tools import repofiles
    from tools.repofiles import RepoFileError

    repo = _hostile_repo(tmp_path)
    (repo / "pkg" / "mod.py").write_text("é = 1\n")
    (repo / "latin.py").write_bytes(b"x = '\xe9'\n")
    assert repofiles.read_text(repo, "prog.py") == PROG
    assert repofiles.read_text(repo, "pkg/mod.py") == "é = 1\n"
    cases = {"x.py": ("special", "FIFO"), "y.py": ("symlink", "symlink"), "big.py": ("too_large", "3000000 bytes"),
             "linked/secret.py": ("symlink", "'linked' is a symlink"), "nope.py": ("missing", "does not exist"),
             "latin.py": ("not_text", "not UTF-8"), "../repo/prog.py": ("bad_path", "plain relative path"),
             "/etc/passwd": ("bad_path", "plain relative path"), "pkg": ("special", "a directory")}
    for rel, (kind, says) in cases.items():
        with pytest.raises(RepoFileError) as err:
            repofiles.read_text(repo, rel)
        assert err.value.kind == kind and says in str(err.value) and rel in str(err.value), (rel, str(err.value))
    assert repofiles.read_bytes(repo, "big.py", max_bytes=10, head=True) == b"\0" * 10
    assert repofiles.read_text_or_none(repo, "x.py") is None
    assert repofiles.is_plain_file(repo, "prog.py") and not repofiles.is_plain_file(repo, "x.py")
    assert not repofiles.is_plain_file(repo, "y.py") and not repofiles.is_plain_file(repo, "linked/secret.py")


def test_the_readers_of_the_repository_use_it(tmp_path, caplog):
    from tools.patch import list_source_files, read_text
    from tools.runner.env import imports_anywhere

    repo = _hostile_repo(tmp_path)
    with caplog.at_level("WARNING"):
        assert list_source_files(repo) == ["prog.py"]
        assert imports_anywhere(repo, {"torch", "hypothesis"}) == {"torch"}  # not outside/secret.py's
    assert any("x.py" in r.getMessage() and "FIFO" in r.getMessage() for r in caplog.records)
    assert read_text(repo / "y.py", repo) is None and read_text(repo / "x.py") is None
    assert read_text(repo / "linked" / "secret.py", repo) is None
    assert read_text(repo / "prog.py", repo) == PROG


def test_materialise_never_writes_through_a_link_a_run_left_in_the_workspace(tmp_path):
    from agent.migration.workspace import materialise

    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "prog.py").write_text(PROG)
    work = tmp_path / "ws"
    work.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("host file\n")
    (work / "prog.py").symlink_to(victim)  # what a sandboxed run could leave in its workspace
    materialise(repo, work, {"prog.py": "edited\n"}, tmp_path / "roots")
    assert victim.read_text() == "host file\n"
    assert not (work / "prog.py").is_symlink() and (work / "prog.py").read_text() == "edited\n"
