"""Ferry's modules that a sandboxed child imports are byte-compiled on the host before a run: the
sandbox binds them read-only and children run with PYTHONDONTWRITEBYTECODE, so a module without
bytecode would be compiled again at every run's start."""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

from sandbox.isolation import CHILD_PACKAGES, ferry_root
from tools.runner import env


def _sources(root: Path) -> list[Path]:
    return [p for p in root.rglob("*.py") if "__pycache__" not in p.parts]


def test_every_module_of_the_bound_packages_gets_current_bytecode(tmp_path, monkeypatch):
    # copies of the packages a child can import (the backend and tools' nested probe/profile/redirect
    # folders among them), none of them compiled yet
    copies = []
    for name in CHILD_PACKAGES:
        dst = tmp_path / name
        shutil.copytree(ferry_root() / name, dst, ignore=shutil.ignore_patterns("__pycache__", "*.so", "build"))
        copies.append(dst)
    monkeypatch.setattr(env, "ferry_child_dirs", lambda: copies)
    env.ensure_bytecode.__wrapped__()
    sources = [p for d in copies for p in _sources(d)]
    nested = [p for p in sources if p.is_relative_to(tmp_path / "tools" / "probe")
              or p.is_relative_to(tmp_path / "backend")]
    assert nested, "the copies hold the probe and the backend"
    missing = [str(p.relative_to(tmp_path)) for p in sources
               if not Path(importlib.util.cache_from_source(str(p))).is_file()]
    assert missing == []


def test_bytecode_older_than_its_source_is_written_again(tmp_path, monkeypatch):
    pkg = tmp_path / "backend"
    (pkg / "sub").mkdir(parents=True)
    mod = pkg / "sub" / "kernels.py"
    mod.write_text("X = 1\n")
    monkeypatch.setattr(env, "ferry_child_dirs", lambda: [pkg])
    env.ensure_bytecode.__wrapped__()
    cached = Path(importlib.util.cache_from_source(str(mod)))
    first = cached.read_bytes()
    mod.write_text("X = 2  # changed\n")
    st = os.stat(mod)
    os.utime(mod, (st.st_atime, st.st_mtime + 5))
    env.ensure_bytecode.__wrapped__()
    assert cached.read_bytes() != first


def test_a_package_that_cannot_be_written_is_left_to_compile_in_memory(tmp_path, monkeypatch):
    def refuse(*_a, **_k):
        raise PermissionError("read-only install")

    monkeypatch.setattr(env, "ferry_child_dirs", lambda: [tmp_path / "backend"])
    import compileall
    monkeypatch.setattr(compileall, "compile_dir", refuse)
    env.ensure_bytecode.__wrapped__()  # no error: the children compile in memory
