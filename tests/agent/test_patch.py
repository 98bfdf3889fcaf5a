"""tools.patch: unified diffs that git apply accepts; only source files."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tools.patch import PatchRequest, build_patch, diff_trees, git_apply, list_source_files


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "orig"
    (repo / "pkg").mkdir(parents=True)
    (repo / "train.py").write_text("import torch\nx = torch.zeros(3).cuda()\nprint(x)\n")
    (repo / "pkg" / "m.py").write_text("a = 1\nb = 2")  # no trailing newline
    (repo / "README.md").write_text("# demo\n")
    return repo


def test_patch_applies_with_git_apply(tmp_path):
    repo = _repo(tmp_path)
    files = {
        "train.py": "import torch\ndevice = torch.device('tpx')\nx = torch.zeros(3).to(device)\nprint(x)\n",
        "pkg/m.py": "a = 1\nb = 3",
        "pkg/new.py": "NEW = True\n",
    }
    patch = build_patch(PatchRequest(original=repo, files=files))
    assert {f.path: f.change for f in patch.files} == {"train.py": "modified", "pkg/m.py": "modified",
                                                       "pkg/new.py": "added"}
    assert "\\ No newline at end of file" in patch.diff
    copy = tmp_path / "copy"
    shutil.copytree(repo, copy)
    git_apply(copy, patch.diff, check=True)
    git_apply(copy, patch.diff)
    for rel, text in files.items():
        assert (copy / rel).read_text() == text
    assert (copy / "README.md").read_text() == "# demo\n"


def test_unchanged_files_give_an_empty_patch(tmp_path):
    repo = _repo(tmp_path)
    patch = build_patch(PatchRequest(original=repo, files={"train.py": (repo / "train.py").read_text()}))
    assert patch.empty and patch.files == []


def test_diff_trees_ignores_run_artefacts(tmp_path):
    repo = _repo(tmp_path)
    ws = tmp_path / "ws"
    shutil.copytree(repo, ws)
    (ws / "train.py").write_text("print('migrated')\n")
    (ws / "__pycache__").mkdir()
    (ws / "__pycache__" / "train.cpython-311.pyc").write_bytes(b"\0\1")
    (ws / "model.pt").write_bytes(b"\0" * 10)
    (ws / "run.log").write_text("loss 1.0\n")
    (ws / ".pytest_cache").mkdir()
    (ws / ".pytest_cache" / "README.md").write_text("cache\n")
    patch = diff_trees(repo, ws)
    assert [f.path for f in patch.files] == ["train.py"]
    assert "model.pt" not in patch.diff and "pytest_cache" not in patch.diff


def test_patch_applies_inside_a_git_repo(tmp_path):
    repo = _repo(tmp_path)
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    patch = build_patch(PatchRequest(original=repo, files={"pkg/m.py": None}))
    assert patch.files[0].change == "deleted"
    git_apply(repo, patch.diff)
    assert not (repo / "pkg" / "m.py").exists()


def test_list_source_files_skips_caches_and_venvs(tmp_path):
    repo = _repo(tmp_path)
    (repo / ".venv" / "lib").mkdir(parents=True)
    (repo / ".venv" / "lib" / "x.py").write_text("")
    (repo / "data.bin").write_bytes(b"\0")
    assert list_source_files(repo) == ["README.md", "pkg/m.py", "train.py"]
