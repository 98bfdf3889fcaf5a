"""A download that stops reading gives its archive slot back (second reader: two stalled downloads kept
every other one at 429 for as long as their connections lasted), and its reader, if it comes back, gets a
broken stream rather than a short archive that looks whole."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agent.service import archive


def _repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    for i in range(6):  # incompressible: 6 x 1 MiB of archive, far more than the queue holds
        (root / f"blob{i}.bin").write_bytes(os.urandom(1024 * 1024))
    return root


def test_stalled_downloads_give_their_slots_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(archive, "STALL_S", 1.0)
    root = _repo(tmp_path)
    stalled = [archive.stream(f"r{i}", root, {}) for i in range(archive.MAX_BUILDS)]
    for gen in stalled:
        next(gen)  # the build starts, then nobody reads
    with pytest.raises(archive.Busy):
        archive.stream("r-next", root, {})
    import time

    deadline = time.monotonic() + 10
    while True:
        try:
            fresh = archive.stream("r-next", root, {})
            break
        except archive.Busy:
            assert time.monotonic() < deadline, "the stalled builds still hold every slot"
            time.sleep(0.2)
    assert sum(len(c) for c in fresh) > 6 * 1024 * 1024  # a reader that reads gets the whole archive
    with pytest.raises(RuntimeError, match="not read in time"):
        for _ in stalled[0]:
            pass
    for gen in stalled[1:]:
        gen.close()
