"""File discovery and per-file handling: .gitignore, vendored folders, notebooks, bad files."""

from __future__ import annotations

import json
import subprocess

from tools.scan.api import scan
from tools.scan.gitignore import IgnoreRules
from tools.scan.models import ScanRequest
from tools.scan.walker import discover

CUDA = "import torch\nx = torch.ones(2).cuda()\n"


def _tree(root, files):
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes):
            p.write_bytes(text)
        else:
            p.write_text(text, encoding="utf-8")


def test_skips_vendored_and_virtualenv_folders(tmp_path):
    _tree(tmp_path, {"a.py": CUDA, ".venv/lib/b.py": CUDA, "venv/c.py": CUDA,
                     "lib/site-packages/d.py": CUDA, "node_modules/e.py": CUDA, "third_party/f.py": CUDA,
                     "myenv/pyvenv.cfg": "home = /usr\n", "myenv/g.py": CUDA, "pkg/h.py": CUDA,
                     "notes.txt": "cuda"})
    assert discover(tmp_path) == ["a.py", "pkg/h.py"]


def test_gitignore_without_git(tmp_path):
    _tree(tmp_path, {".gitignore": "generated/\n*_pb2.py\n!keep_pb2.py\n/top.py\n",
                     "generated/a.py": CUDA, "x_pb2.py": CUDA, "keep_pb2.py": CUDA, "top.py": CUDA,
                     "sub/top.py": CUDA, "sub/.gitignore": "local.py\n", "sub/local.py": CUDA, "local.py": CUDA})
    assert discover(tmp_path) == ["keep_pb2.py", "local.py", "sub/top.py"]
    assert len(discover(tmp_path, respect_gitignore=False)) == 7


def test_gitignore_inside_a_git_repo(tmp_path):
    _tree(tmp_path, {".gitignore": "ignored.py\n", "ignored.py": CUDA, "kept.py": CUDA, "new.py": CUDA})
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "add", "kept.py", ".gitignore"], check=True)
    assert discover(tmp_path) == ["kept.py", "new.py"]


def test_ignore_rules_double_star():
    rules = IgnoreRules()
    from tools.scan.gitignore import parse

    rules.patterns = parse("**/cache/**\nbuild*/\n")
    assert rules.ignored("a/cache/x.py", False)
    assert rules.ignored("builds", True)
    assert not rules.ignored("builds", False)
    assert not rules.ignored("a/x.py", False)


def test_bad_files_are_noted_and_the_scan_goes_on(tmp_path):
    _tree(tmp_path, {"good.py": CUDA, "broken.py": "import torch\nx = torch.ones(2).cuda(\n",
                     "broken_plain.py": "def f(:\n", "binary.py": b"\x00\x01\x02cuda",
                     "latin.py": "s = 'caf\xe9'\n".encode("latin-1"), "huge.py": "x = 1\n" * 100})
    report = scan(ScanRequest(path=tmp_path, max_file_bytes=300))
    kinds = {n.file: n for n in report.notes}
    assert kinds["broken.py"].kind == "parse_error" and kinds["broken.py"].line is not None
    assert kinds["broken_plain.py"].kind == "parse_error" and kinds["broken_plain.py"].line == 1
    assert kinds["binary.py"].kind == "skipped_binary"
    assert kinds["latin.py"].kind == "skipped_encoding"
    assert kinds["huge.py"].kind == "skipped_size"
    assert [(f.file, f.rule_id) for f in report.findings] == [("good.py", "FRY002")]


def test_notebook_code_cells_are_scanned_with_cell_and_line(tmp_path):
    nb = {"cells": [
        {"cell_type": "markdown", "metadata": {}, "source": ["x.cuda() in markdown is ignored\n"]},
        {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
         "source": ["%matplotlib inline\n", "import torch\n", "x = torch.ones(2).cuda()\n"]},
        {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
         "source": ["%%bash\n", "echo cuda\n"]},
    ], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (tmp_path / "nb.ipynb").write_text(json.dumps(nb, indent=1), encoding="utf-8")
    report = scan(ScanRequest(path=tmp_path))
    assert [(f.file, f.cell, f.line, f.rule_id) for f in report.findings] == [("nb.ipynb", 1, 3, "FRY002")]


def test_a_repositorys_own_git_config_runs_nothing(tmp_path):
    """An untrusted repository's .git/config names a command for git to run (core.fsmonitor); listing
    its files must not run it."""
    from tools.scan.walker import _git_files

    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "a.py").write_text("x = 1\n")
    marker = tmp_path / "PWNED"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "config", "core.fsmonitor", f"touch {marker}; false"], check=True)
    assert _git_files(repo) == ["a.py"]
    assert not marker.exists()
    subprocess.run(["git", "-C", str(repo), "ls-files", "--others"], capture_output=True)  # plain git runs it
    assert marker.exists()
