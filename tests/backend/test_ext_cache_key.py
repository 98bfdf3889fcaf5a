"""The extension cache key names everything the library depends on, compiler flags included.

A cached ``tpx_ext.so`` is loaded without rebuilding when its digest matches: a change of the
flags it is built with (``ext_cache.CFLAGS``) must give another digest, or a process would load a
library built with the old ones.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from backend_autoload import ext_cache


def test_the_digest_changes_with_the_compiler_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    before = ext_cache.source_hash()
    assert ext_cache.source_hash() == before  # a pure function of its inputs
    monkeypatch.setattr(ext_cache, "CFLAGS", (*ext_cache.CFLAGS, "-DTPX_SOMETHING_ELSE"))
    assert ext_cache.source_hash() != before


def test_the_build_compiles_with_the_flags_the_digest_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from torch.utils import cpp_extension

    from backend import _ext

    seen: dict = {}

    class Stop(Exception):
        pass

    def load(**kwargs):
        seen.update(kwargs)
        raise Stop

    monkeypatch.setattr(cpp_extension, "load", load)
    monkeypatch.setattr(ext_cache, "CFLAGS", ("-O2", "-DTPX_FLAG_UNDER_TEST"))
    with pytest.raises(Stop):
        _ext._build(tmp_path)
    assert seen["extra_cflags"] == ["-O2", "-DTPX_FLAG_UNDER_TEST"]
    assert [str(s) for s in ext_cache.SOURCES] == seen["sources"]
