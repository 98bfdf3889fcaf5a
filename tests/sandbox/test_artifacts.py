"""sandbox.artifacts: what a run could write is copied out without following links, regular files only,
size-capped before reading; every refusal is named."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from sandbox.artifacts import (
    ArtifactLimits,
    ArtifactMissing,
    ArtifactRefused,
    collect,
    is_regular_file,
    read_bytes,
    read_text,
    write_text,
)

SECRET = "root-only-secret-4f1c"


@pytest.fixture
def host(tmp_path: Path) -> dict[str, Path]:
    """A 0600 host file and a host dir with another one: both outside the run's directory."""
    secret = tmp_path / "host" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text(SECRET + "\n")
    secret.chmod(0o600)
    (tmp_path / "host" / "index.json").write_text(f'{{"secret": "{SECRET}"}}')
    return {"secret": secret, "dir": secret.parent, "absent": tmp_path / "host" / "must-not-exist.md"}


@pytest.fixture
def src(tmp_path: Path) -> Path:
    d = tmp_path / "child"
    (d / "probe").mkdir(parents=True)
    (d / "probe" / "index.json").write_text('{"format": "ferry-probe/1"}')
    (d / "redirect.jsonl").write_text('{"file": "a.py"}\n')
    return d


def _refusals(got) -> dict[str, str]:
    return {r.path: r.reason for r in got.refused}


def _tree(root: Path, skip: Path) -> dict[str, tuple[int, bytes]]:
    out = {}
    for p in sorted(root.rglob("*")):
        if p == skip or skip in p.parents:
            continue
        st = os.lstat(p)
        body = os.readlink(p).encode() if p.is_symlink() else (p.read_bytes() if p.is_file() else b"")
        out[str(p)] = (st.st_mtime_ns, body)
    return out


def _all_bytes(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def test_regular_files_are_copied_into_a_private_directory(src: Path, tmp_path: Path):
    dest = tmp_path / "collected"
    got = collect(src, dest)
    assert sorted(got.accepted) == ["probe/index.json", "redirect.jsonl"] and got.refused == []
    assert (dest / "probe" / "index.json").read_text() == '{"format": "ferry-probe/1"}'
    assert got.bytes_copied == len('{"format": "ferry-probe/1"}') + len('{"file": "a.py"}\n')
    assert (dest.stat().st_mode & 0o777) == 0o700 and dest.stat().st_uid == os.geteuid()
    assert read_text(dest, "probe/index.json", max_bytes=100) == '{"format": "ferry-probe/1"}'
    assert is_regular_file(dest, "redirect.jsonl") and not is_regular_file(dest, "probe")


def test_links_to_host_files_and_paths_are_refused_and_never_followed(src: Path, tmp_path: Path, host):
    (src / "junit.xml").symlink_to(host["secret"])  # an existing root-only file
    (src / "profile.md").symlink_to(host["absent"])  # a dangling link: a path the host must not create
    (src / "probe" / "chunk_00000.pt").symlink_to(host["secret"])
    before = _tree(tmp_path, tmp_path / "collected")
    dest = tmp_path / "collected"
    got = collect(src, dest)
    assert _refusals(got) == {"junit.xml": "symlink", "profile.md": "symlink", "probe/chunk_00000.pt": "symlink"}
    assert sorted(got.accepted) == ["probe/index.json", "redirect.jsonl"]
    assert SECRET.encode() not in _all_bytes(dest) and not host["absent"].exists()
    assert _tree(tmp_path, dest) == before  # nothing outside dest was written
    for rel in ("junit.xml", "profile.md"):
        with pytest.raises(ArtifactRefused, match="symlink") as exc:
            read_bytes(src, rel, max_bytes=1 << 20)
        assert exc.value.reason == "symlink" and exc.value.path == rel
    assert not host["absent"].exists()


def test_a_directory_swapped_for_a_link_is_refused_at_every_level(src: Path, tmp_path: Path, host):
    (src / "profile").symlink_to(host["dir"], target_is_directory=True)
    (src / "probe" / "nested").symlink_to(host["dir"], target_is_directory=True)
    got = collect(src, tmp_path / "collected")
    assert _refusals(got) == {"profile": "symlink", "probe/nested": "symlink"}
    assert SECRET.encode() not in _all_bytes(tmp_path / "collected")
    with pytest.raises(ArtifactRefused) as exc:
        read_bytes(src, "profile/index.json", max_bytes=1 << 20)  # a symlinked parent, not only the leaf
    assert exc.value.reason == "directory is a symlink" and exc.value.path == "profile"
    link_base = tmp_path / "base-link"
    link_base.symlink_to(host["dir"], target_is_directory=True)
    with pytest.raises(ArtifactRefused, match="is a symlink"):
        read_bytes(link_base, "secret.txt", max_bytes=1 << 20)
    with pytest.raises(ArtifactRefused, match="is a symlink"):
        collect(link_base, tmp_path / "collected-2")
    assert not (tmp_path / "collected-2").exists()


def test_a_fifo_is_refused_without_blocking(src: Path, tmp_path: Path):
    os.mkfifo(src / "junit.xml")
    box: dict = {}

    def work() -> None:
        box["got"] = collect(src, tmp_path / "collected")
        try:
            read_bytes(src, "junit.xml", max_bytes=1 << 20)
        except ArtifactRefused as exc:
            box["reason"] = exc.reason

    t = threading.Thread(target=work, daemon=True)
    t.start()
    t.join(timeout=10)
    assert not t.is_alive(), "collect blocked on a FIFO"
    assert _refusals(box["got"]) == {"junit.xml": "not a regular file (fifo)"}
    assert box["reason"] == "not a regular file (fifo)"


def test_a_hard_link_to_a_host_file_is_refused(src: Path, tmp_path: Path, host):
    os.link(host["secret"], src / "redirect-2.jsonl")
    got = collect(src, tmp_path / "collected")
    assert _refusals(got) == {"redirect-2.jsonl": "hard link to another file"}
    with pytest.raises(ArtifactRefused, match="hard link to another file"):
        read_bytes(src, "redirect-2.jsonl", max_bytes=1 << 20)
    assert SECRET.encode() not in _all_bytes(tmp_path / "collected")
    assert host["secret"].read_text() == SECRET + "\n"


def _bytes_read_by_this_thread() -> int:
    for line in Path("/proc/thread-self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/thread-self/io")


def test_a_huge_sparse_file_is_refused_without_being_read(src: Path, tmp_path: Path):
    with open(src / "probe" / "chunk_00000.pt", "wb") as fh:
        fh.truncate(1 << 30)  # 1 GiB, no blocks
    t0 = time.monotonic()
    before = _bytes_read_by_this_thread()
    got = collect(src, tmp_path / "collected", max_file_bytes=64 << 20)
    with pytest.raises(ArtifactRefused, match=r"too large: 1073741824 bytes > cap 1024"):
        read_bytes(src, "probe/chunk_00000.pt", max_bytes=1024)
    read = _bytes_read_by_this_thread() - before
    assert read < 1 << 20, f"{read} bytes were read"
    assert time.monotonic() - t0 < 5
    reason = _refusals(got)["probe/chunk_00000.pt"]
    assert reason.startswith(f"too large: {1 << 30} bytes > cap {64 << 20}")
    assert "FERRY_ARTIFACT_MAX_FILE_BYTES" in reason
    assert not (tmp_path / "collected" / "probe" / "chunk_00000.pt").exists()


def test_the_total_and_the_file_count_are_capped(tmp_path: Path):
    src = tmp_path / "child"
    src.mkdir()
    for i in range(3):
        (src / f"chunk_{i}.pt").write_bytes(b"x" * 400)
    got = collect(src, tmp_path / "a", max_total_bytes=1000)
    assert got.accepted == ["chunk_0.pt", "chunk_1.pt"] and got.bytes_copied == 800
    assert _refusals(got) == {"chunk_2.pt": "too large in all: 1200 bytes > cap 1000 (FERRY_ARTIFACT_MAX_TOTAL_BYTES)"}
    many = collect(src, tmp_path / "b", max_files=2)
    assert len(many.accepted) <= 2 and "too many files: more than 2" in _refusals(many)["."]


def test_a_flood_of_refusals_is_summed_up_not_listed_one_by_one(tmp_path: Path, caplog):
    """Every refused entry was kept and logged with its full path: a run leaving thousands of links
    under 255-byte names 15 levels deep made megabytes of warnings, result.json and migration state."""
    import logging

    src = tmp_path / "child"
    src.mkdir()
    fd = os.open(src, os.O_RDONLY | os.O_DIRECTORY)
    for i in range(15):  # past PATH_MAX in all: made as the run can, relative to each directory
        name = f"{i:02d}" + "d" * 250
        os.mkdir(name, dir_fd=fd)
        fd, parent = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd), fd
        os.close(parent)
    for i in range(600):
        os.symlink("/etc/shadow", f"{i:04d}" + "l" * 250, dir_fd=fd)
    os.close(fd)
    (src / "ok.txt").write_text("kept")
    caplog.set_level(logging.WARNING, logger="sandbox.artifacts")
    got = collect(src, tmp_path / "collected", max_files=10_000)
    assert got.accepted == ["ok.txt"]
    assert len(got.refused) <= 101
    assert got.refused[0].reason == "symlink" and len(got.refused[0].path) <= 310
    assert got.refused[-1].path == "..." and got.refused[-1].reason.startswith("500 more entries refused")
    assert sum(len(r.path) + len(r.reason) for r in got.refused) < 64 * 1024
    assert len(caplog.records) <= 25 and sum(len(r.getMessage()) for r in caplog.records) < 16 * 1024
    capped = collect(src, tmp_path / "capped", max_files=300)  # the cap that stopped the walk is always named
    assert any(r.reason.startswith("too many files: more than 300") for r in capped.refused)


def test_other_odd_names_and_paths_are_refused(src: Path, tmp_path: Path):
    os.close(os.open(os.path.join(os.fsencode(src), b"bad-\xff-name"), os.O_CREAT | os.O_WRONLY, 0o600))
    deep = src
    for i in range(20):
        deep = deep / f"d{i}"
    deep.mkdir(parents=True)
    got = collect(src, tmp_path / "collected")
    refused = _refusals(got)
    assert refused["bad-\\xff-name"] == "file name is not valid UTF-8"
    assert any(reason.startswith("too deep") for reason in refused.values())
    for rel in ("../child/redirect.jsonl", "/etc/passwd", "probe/../redirect.jsonl", ""):
        with pytest.raises(ArtifactRefused, match="not a plain relative path"):
            read_bytes(src, rel, max_bytes=1 << 20)
    with pytest.raises(ArtifactMissing):
        read_bytes(src, "profile/profile.json", max_bytes=1 << 20)
    with pytest.raises(ArtifactRefused, match="not a directory"):
        read_bytes(src, "redirect.jsonl/x", max_bytes=1 << 20)


def test_host_writes_replace_a_planted_link_and_refuse_a_run_owned_directory(tmp_path: Path, host):
    out = tmp_path / "report"
    out.mkdir()
    (out / "profile.md").symlink_to(host["secret"])
    (out / "other.md").symlink_to(host["absent"])
    write_text(out, "profile.md", "# report\n")
    write_text(out, "other.md", "# other\n")
    assert host["secret"].read_text() == SECRET + "\n" and not host["absent"].exists()
    assert not (out / "profile.md").is_symlink() and (out / "profile.md").read_text() == "# report\n"
    assert sorted(p.name for p in out.iterdir()) == ["other.md", "profile.md"]  # no temp file left
    with pytest.raises(ArtifactRefused, match="not a plain file name"):
        write_text(out, "../escape.md", "x")
    if os.geteuid() == 0:
        run_owned = tmp_path / "run-owned"
        run_owned.mkdir()
        os.chown(run_owned, 65534, 65534)
        with pytest.raises(ArtifactRefused, match="belongs to uid 65534"):
            write_text(run_owned, "profile.md", "x")
        assert not (run_owned / "profile.md").exists()


def test_caps_come_from_ferry_variables_and_bad_values_name_the_variable():
    limits = ArtifactLimits.from_env({"FERRY_ARTIFACT_MAX_FILE_BYTES": "1e6", "FERRY_ARTIFACT_MAX_FILES": "12"})
    assert limits.max_file_bytes == 1_000_000 and limits.max_files == 12
    assert limits.max_total_bytes == ArtifactLimits().max_total_bytes
    with pytest.raises(ValueError, match="FERRY_ARTIFACT_MAX_TOTAL_BYTES='lots' is not a positive whole number"):
        ArtifactLimits.from_env({"FERRY_ARTIFACT_MAX_TOTAL_BYTES": "lots"})
