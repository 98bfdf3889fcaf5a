"""Workspace copies: private, complete, never linked back to the original."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sandbox import WorkspaceError, create_workspace


def test_copy_is_private_and_complete(tmp_path: Path):
    src = tmp_path / "repo"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "a.py").write_text("A = 1\n")
    os.link(src / "pkg" / "a.py", src / "pkg" / "hard.py")  # a hard link inside the original
    (src / "link.py").symlink_to("pkg/a.py")
    (src / "run.sh").write_text("#!/bin/sh\n")
    (src / "run.sh").chmod(0o755)
    with create_workspace(src, root=tmp_path / "ws") as ws:
        assert ws.method in ("reflink", "copy")
        copy = ws.path
        assert (copy / "pkg" / "a.py").read_text() == "A = 1\n"
        assert (copy / "link.py").is_symlink() and os.readlink(copy / "link.py") == "pkg/a.py"
        assert os.access(copy / "run.sh", os.X_OK)
        # No inode is shared with the original: writes in the copy cannot reach it.
        for rel in ("pkg/a.py", "pkg/hard.py", "run.sh"):
            assert (copy / rel).stat().st_ino != (src / rel).stat().st_ino
        (copy / "pkg" / "a.py").write_text("A = 2\n")
        (copy / "pkg" / "hard.py").write_text("B\n")
        assert (src / "pkg" / "a.py").read_text() == "A = 1\n"
        assert (src / "pkg" / "hard.py").read_text() == "A = 1\n"
    assert not copy.exists()


def test_bad_source_is_a_clear_error(tmp_path: Path):
    with pytest.raises(WorkspaceError, match="does not exist"):
        create_workspace(tmp_path / "missing")
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(WorkspaceError, match="not a directory"):
        create_workspace(tmp_path / "file.txt")
