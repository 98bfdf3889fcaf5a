"""agent.service.uploads: real archives built here, real links, fifos and permissions."""

from __future__ import annotations

import gzip
import io
import os
import stat
import struct
import tarfile
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from agent.service.uploads import (
    NO_ROOTS,
    NOT_ARCHIVE,
    SourceRefused,
    UploadLimits,
    extract_archive,
    resolve_allowed,
    snapshot_tree,
)

LIMITS = UploadLimits()
REPO = {"train.py": b"import torch\nprint('hi')\n", "pkg/__init__.py": b"", "pkg/model.py": b"X = 1\n"}

TarMember = tuple[tarfile.TarInfo, bytes | None]


def _info(name: str, data: bytes = b"", mode: int = 0o644, kind: bytes = tarfile.REGTYPE,
          link: str = "") -> TarMember:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.linkname = kind, mode, link
    if kind == tarfile.REGTYPE:
        info.size = len(data)
        return info, data
    return info, None


def _tar(path: Path, members: list[TarMember], gz: bool = True, fmt: int = tarfile.PAX_FORMAT) -> Path:
    with tarfile.open(path, "w:gz" if gz else "w", format=fmt, encoding="utf-8",
                      errors="surrogateescape") as tf:
        for info, data in members:
            tf.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def _zip(path: Path, members: list[tuple[str, bytes, int]]) -> Path:
    """members: (name, data, unix mode with its file type bits, 0 for none)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data, mode in members:
            info = zipfile.ZipInfo(name)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = mode << 16
            zf.writestr(info, data)
    return path


def _dest(tmp_path: Path) -> Path:
    dest = tmp_path / "dest"
    dest.mkdir()
    return dest


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _refused(archive: Path, dest: Path, match: str, limits: UploadLimits = LIMITS) -> None:
    with pytest.raises(SourceRefused, match=match):
        extract_archive(archive, dest, limits)
    assert list(dest.iterdir()) == [], "a refusal leaves nothing behind"


# --- extract_archive: what is accepted ---------------------------------------------------------------

def test_tar_gz_top_level_dir_is_stripped_and_modes_are_ferrys(tmp_path: Path) -> None:
    members = [_info("repo-main", kind=tarfile.DIRTYPE, mode=0o777)]
    members += [_info(f"repo-main/{name}", data) for name, data in REPO.items()]
    members += [_info("repo-main/run.sh", b"#!/bin/sh\n", mode=0o4777),  # setuid, world-writable
                _info("repo-main/data.txt", b"x", mode=0o666)]
    dest = _dest(tmp_path)
    assert extract_archive(_tar(tmp_path / "upload.bin", members), dest, LIMITS) == 5
    assert _tree(dest) == {**REPO, "run.sh": b"#!/bin/sh\n", "data.txt": b"x"}
    assert _mode(dest / "run.sh") == 0o755
    assert _mode(dest / "data.txt") == 0o644
    assert _mode(dest / "train.py") == 0o644
    assert _mode(dest / "pkg") == 0o755
    assert not any(p.name.startswith(".ferry-unpack-") for p in dest.iterdir())


def test_zip_without_a_single_top_dir_keeps_its_layout(tmp_path: Path) -> None:
    members = [(name, data, stat.S_IFREG | 0o644) for name, data in REPO.items()]
    members.append(("tool.py", b"#!/usr/bin/env python\n", stat.S_IFREG | 0o775))
    dest = _dest(tmp_path)
    assert extract_archive(_zip(tmp_path / "a.tgz", members), dest, LIMITS) == 4  # the name is not trusted
    assert _tree(dest) == {**REPO, "tool.py": b"#!/usr/bin/env python\n"}
    assert _mode(dest / "tool.py") == 0o755
    assert _mode(dest / "pkg" / "model.py") == 0o644


def test_plain_tar_and_finder_zip(tmp_path: Path) -> None:
    dest = _dest(tmp_path)
    assert extract_archive(_tar(tmp_path / "a.tar", [_info("./a.py", b"1")], gz=False), dest, LIMITS) == 1
    assert _tree(dest) == {"a.py": b"1"}
    finder = _zip(tmp_path / "f.zip", [("repo/x.py", b"2", 0), ("__MACOSX/repo/._x.py", b"fork", 0)])
    dest2 = tmp_path / "dest2"
    dest2.mkdir()
    assert extract_archive(finder, dest2, LIMITS) == 1
    assert _tree(dest2) == {"x.py": b"2"}


# --- extract_archive: what is refused -----------------------------------------------------------------

def test_not_an_archive(tmp_path: Path) -> None:
    dest = _dest(tmp_path)
    text = tmp_path / "repo.tar.gz"
    text.write_bytes(b"print('not an archive')\n")
    _refused(text, dest, f"^{NOT_ARCHIVE}")
    gz = tmp_path / "x.gz"
    gz.write_bytes(gzip.compress(b"just some text, not a tar" * 100))
    _refused(gz, dest, f"^{NOT_ARCHIVE}")
    broken = tmp_path / "broken.zip"
    broken.write_bytes(_zip(tmp_path / "ok.zip", [("a.py", os.urandom(5000), 0)]).read_bytes()[:2000])
    _refused(broken, dest, f"^{NOT_ARCHIVE}")


@pytest.mark.parametrize("name", ["../evil.py", "a/../../evil.py", "/abs.py"])
def test_zip_slip_and_absolute_names(tmp_path: Path, name: str) -> None:
    dest = _dest(tmp_path)
    match = "absolute name" if name.startswith("/") else r"'\.\.' part"
    _refused(_zip(tmp_path / "z.zip", [("ok.py", b"1", 0), (name, b"pwned", 0)]), dest, match)
    _refused(_tar(tmp_path / "t.tgz", [_info("ok.py", b"1"), _info(name, b"pwned")]), dest, match)
    assert not (tmp_path / "evil.py").exists() and not Path("/abs.py").exists()


def test_link_members_are_refused(tmp_path: Path) -> None:
    dest = _dest(tmp_path)
    passwd = Path("/etc/passwd").read_bytes()
    hard = _tar(tmp_path / "h.tgz", [_info("a.py", b"1"), _info("passwd", kind=tarfile.LNKTYPE, link="/etc/passwd")])
    _refused(hard, dest, "is a hard link")
    inside = _tar(tmp_path / "s.tgz", [_info("a.py", b"1"), _info("b.py", kind=tarfile.SYMTYPE, link="a.py")])
    _refused(inside, dest, "is a symbolic link")
    # a link, then a file written "through" it: refused at the link, nothing lands in /tmp
    through = _tar(tmp_path / "t.tgz", [_info("d", kind=tarfile.SYMTYPE, link=str(tmp_path)), _info("d/x.py", b"2")])
    _refused(through, dest, "is a symbolic link")
    assert not (tmp_path / "x.py").exists()
    zlink = _zip(tmp_path / "l.zip", [("a.py", b"1", 0), ("etc", b"/etc/passwd", stat.S_IFLNK | 0o777)])
    _refused(zlink, dest, "is a symbolic link")
    assert Path("/etc/passwd").read_bytes() == passwd


def test_special_members_are_refused(tmp_path: Path) -> None:
    dest = _dest(tmp_path)
    for kind in (tarfile.FIFOTYPE, tarfile.CHRTYPE, tarfile.BLKTYPE):
        _refused(_tar(tmp_path / "d.tgz", [_info("dev", kind=kind)]), dest, "device file, fifo")
    _refused(_zip(tmp_path / "f.zip", [("fifo", b"", stat.S_IFIFO | 0o644)]), dest, "device file, fifo")


def _patched_zip(tmp_path: Path, placeholder: str, raw: bytes) -> Path:
    """A zip whose member name's stored bytes are `raw` (zipfile itself would not write them)."""
    path = _zip(tmp_path / "p.zip", [("ok.py", b"1", 0), (placeholder, b"2", 0)])
    data = path.read_bytes()
    assert len(raw) == len(placeholder) and data.count(placeholder.encode()) == 2
    path.write_bytes(data.replace(placeholder.encode(), raw))
    return path


def test_names_that_are_tricks(tmp_path: Path) -> None:
    dest = _dest(tmp_path)
    _refused(_patched_zip(tmp_path, "evilXpy", b"evil\x00py"), dest, "NUL or control character")
    _refused(_patched_zip(tmp_path, "Xbad.py", b"\xffbad.py"), dest, "not valid UTF-8")
    bad = b"\xffbad.py".decode("utf-8", "surrogateescape")
    _refused(_tar(tmp_path / "u.tar", [_info(bad, b"1")], gz=False, fmt=tarfile.USTAR_FORMAT), dest,
             "not valid UTF-8")
    _refused(_tar(tmp_path / "b.tgz", [_info("..\\..\\evil.py", b"1")]), dest, "backslash")
    _refused(_zip(tmp_path / "b.zip", [("a\\b.py", b"1", 0)]), dest, "backslash")


def test_duplicates_that_would_overwrite(tmp_path: Path) -> None:
    dest = _dest(tmp_path)
    _refused(_tar(tmp_path / "d.tgz", [_info("a.py", b"good"), _info("./a.py", b"evil")]), dest, "appears twice")
    _refused(_tar(tmp_path / "f.tgz", [_info("a", b"file"), _info("a/b.py", b"x")]), dest, "appears twice")
    with pytest.warns(UserWarning, match="Duplicate name"):
        dup = _zip(tmp_path / "d.zip", [("a.py", b"good", 0), ("a.py", b"evil", 0)])
    _refused(dup, dest, "appears twice")


def test_limits_on_files_bytes_and_size(tmp_path: Path) -> None:
    dest = _dest(tmp_path)
    four = _tar(tmp_path / "4.tgz", [_info(f"f{i}.py", b"1") for i in range(4)])
    _refused(four, dest, "more than 3 files", UploadLimits(max_files=3))
    assert extract_archive(four, dest, UploadLimits(max_files=4)) == 4
    _empty_dest = tmp_path / "e"
    _empty_dest.mkdir()
    two = _zip(tmp_path / "2.zip", [("a.bin", os.urandom(600), 0), ("b.bin", os.urandom(600), 0)])
    _refused(two, _empty_dest, "more than 1000 bytes", UploadLimits(max_unpacked_bytes=1000))
    _refused(two, _empty_dest, "over the limit of 100 bytes", UploadLimits(max_bytes=100))
    _refused(_tar(tmp_path / "0.tgz", [_info("d", kind=tarfile.DIRTYPE)]), _empty_dest, "holds no files")


@pytest.mark.parametrize("build", [
    lambda p: _tar(p / "bomb.tgz", [_info("zeros.bin", bytes(50 * 1024**2))]),
    lambda p: _zip(p / "bomb.zip", [("zeros.bin", bytes(50 * 1024**2), 0)]),
])
def test_bomb_is_refused_before_it_is_written(tmp_path: Path, build: Callable[[Path], Path]) -> None:
    bomb = build(tmp_path)
    assert bomb.stat().st_size * 100 < 50 * 1024**2
    _refused(bomb, _dest(tmp_path), "likely archive bomb")
    # the ratio stops it, not the unpacked-bytes limit: a generous ratio lets the same archive through
    roomy = tmp_path / "roomy"
    roomy.mkdir()
    assert extract_archive(bomb, roomy, UploadLimits(max_ratio=1e6)) == 1


def test_dest_must_be_empty(tmp_path: Path) -> None:
    dest = _dest(tmp_path)
    (dest / "x").write_text("1")
    with pytest.raises(ValueError, match="must be an empty directory"):
        extract_archive(_tar(tmp_path / "a.tgz", [_info("a.py", b"1")]), dest, LIMITS)


# --- resolve_allowed ------------------------------------------------------------------------------------

def test_resolve_allowed(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "repo").mkdir(parents=True)
    outside.mkdir()
    (root / "file.py").write_text("1")
    (root / "escape").symlink_to(outside)
    (root / "inner").symlink_to(root / "repo")
    linked_root = tmp_path / "linked"
    linked_root.symlink_to(root)
    assert resolve_allowed(str(root / "repo"), [root]) == (root / "repo").resolve()
    assert resolve_allowed(str(root / "inner"), [root]) == (root / "repo").resolve()
    assert resolve_allowed(str(linked_root / "repo"), [linked_root]) == (root / "repo").resolve()
    with pytest.raises(SourceRefused, match=f"not under an allowed root \\({root}\\)"):
        resolve_allowed(str(root / "escape"), [root])
    with pytest.raises(SourceRefused, match="not under an allowed root"):
        resolve_allowed("/etc", [root, outside])
    with pytest.raises(SourceRefused, match=r"'\.\.' parts"):
        resolve_allowed(f"{root}/repo/../../outside", [root])
    with pytest.raises(SourceRefused, match="absolute directory"):
        resolve_allowed("repo", [root])
    with pytest.raises(SourceRefused, match="not a directory"):
        resolve_allowed(str(root / "file.py"), [root])
    with pytest.raises(SourceRefused, match="not a directory"):
        resolve_allowed(str(root / "missing"), [root])
    with pytest.raises(SourceRefused) as exc:
        resolve_allowed(str(root / "repo"), [])
    assert str(exc.value) == NO_ROOTS


# --- snapshot_tree --------------------------------------------------------------------------------------

def _repo(root: Path) -> Path:
    for name, data in REPO.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    (root / "run.sh").write_bytes(b"#!/bin/sh\n")
    os.chmod(root / "run.sh", 0o4777)
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("[core]\n")
    (root / "pkg" / "__pycache__").mkdir()
    (root / "pkg" / "__pycache__" / "model.cpython-311.pyc").write_bytes(b"\0")
    return root


def test_snapshot_copies_files_and_skips_git_links_inside_and_fifos(tmp_path: Path) -> None:
    src = _repo(tmp_path / "src")
    (src / "alias.py").symlink_to("train.py")
    os.mkfifo(src / "pipe")
    dest = tmp_path / "dest"
    assert snapshot_tree(src, dest, LIMITS) == 4
    assert _tree(dest) == {**REPO, "run.sh": b"#!/bin/sh\n"}
    assert _mode(dest / "run.sh") == 0o755 and _mode(dest / "train.py") == 0o644
    assert not (dest / "alias.py").exists() and not (dest / "pipe").exists()


@pytest.mark.parametrize("target", ["/etc/passwd", "../outside", "/etc"])
def test_snapshot_refuses_a_link_out(tmp_path: Path, target: str) -> None:
    src = _repo(tmp_path / "src")
    (tmp_path / "outside").write_text("secret")
    (src / "pkg" / "x").symlink_to(target if target.startswith("/") else "../" + target)
    dest = _dest(tmp_path)
    with pytest.raises(SourceRefused, match="'pkg/x' is a link to outside"):
        snapshot_tree(src, dest, LIMITS)
    assert list(dest.iterdir()) == []


def test_snapshot_limits_and_bad_sources(tmp_path: Path) -> None:
    src = _repo(tmp_path / "src")
    with pytest.raises(SourceRefused, match="more than 3 files"):
        snapshot_tree(src, tmp_path / "d1", UploadLimits(max_files=3))
    with pytest.raises(SourceRefused, match="more than 20 bytes"):
        snapshot_tree(src, tmp_path / "d2", UploadLimits(max_unpacked_bytes=20))
    assert list((tmp_path / "d1").iterdir()) == [] and list((tmp_path / "d2").iterdir()) == []
    (tmp_path / "link").symlink_to(src)
    with pytest.raises(SourceRefused, match="not a directory the server can read"):
        snapshot_tree(tmp_path / "link", tmp_path / "d3", LIMITS)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads mode-0 files: the unreadable case needs a non-root run")
def test_snapshot_refuses_what_the_server_cannot_read(tmp_path: Path) -> None:
    src = _repo(tmp_path / "src")
    (src / "secret.key").write_text("k")
    os.chmod(src / "secret.key", 0)
    with pytest.raises(SourceRefused, match=r"'secret\.key' is not readable by the server"):
        snapshot_tree(src, tmp_path / "d1", LIMITS)
    os.chmod(src / "secret.key", 0o644)
    (src / "private").mkdir(mode=0o700)
    os.chmod(src / "private", 0)
    try:
        with pytest.raises(SourceRefused, match="'private' is not readable by the server"):
            snapshot_tree(src, tmp_path / "d2", LIMITS)
    finally:
        os.chmod(src / "private", 0o700)


def test_tar_header_and_skipped_member_bombs(tmp_path: Path) -> None:
    """What tarfile reads itself (a pax header, data it seeks over) is capped too, not only what is written."""
    dest = _dest(tmp_path)
    info, data = _info("a.py", b"1")
    info.pax_headers = {"comment": "x" * (8 * 1024**2)}
    _refused(_tar(tmp_path / "pax.tgz", [(info, data)]), dest, "header over 1048576 bytes")
    skipped = _tar(tmp_path / "skip.tgz", [_info("__MACOSX/zeros", bytes(50 * 1024**2)), _info("a.py", b"1")])
    _refused(skipped, dest, "tar stream runs past .* likely archive bomb")
    assert extract_archive(skipped, dest, UploadLimits(max_ratio=1e6)) == 1


def test_damaged_zip_offsets_are_refused_not_crashed(tmp_path: Path) -> None:
    """A central directory whose offsets point before the file's start (zipfile seeks there: EINVAL)."""
    path = _zip(tmp_path / "z.zip", [("a.py", b"1" * 100, 0)])
    raw = bytearray(path.read_bytes())
    eocd = raw.rfind(b"PK\x05\x06")
    (cd_offset,) = struct.unpack_from("<I", raw, eocd + 16)
    struct.pack_into("<I", raw, eocd + 16, cd_offset + 100)
    path.write_bytes(bytes(raw))
    _refused(path, _dest(tmp_path), f"^{NOT_ARCHIVE}; this zip is damaged")
