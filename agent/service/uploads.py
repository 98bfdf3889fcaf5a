"""A session's source, made safe: an uploaded archive unpacked, or an allowed server directory copied.

Both write only under `dest`, never through a link (every file is created with O_CREAT|O_EXCL|O_NOFOLLOW
in directories this module made), with Ferry's own modes (0644, 0755 for executables and directories:
no setuid, nothing group- or world-writable), counting files and bytes as they are written against
`UploadLimits`. A refusal is `SourceRefused` (the route's 400; its message says what was wrong and what
to do) and leaves nothing behind in `dest`.
"""

from __future__ import annotations

import gzip
import io
import logging
import os
import shutil
import stat
import tarfile
import tempfile
import zipfile
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from pydantic import BaseModel, ConfigDict, Field

from tools.repopath import repo_path_problem

logger = logging.getLogger(__name__)

_CHUNK = 1 << 16
RATIO_FLOOR = 1 << 20  # the ratio is judged once this much is written: a tiny archive is never a bomb
MAX_DEPTH = 64
MAX_HEADER = 1 << 20  # tarfile reads a pax or long-name header into memory whole: larger ones are refused
SKIPPED = frozenset({".git", "__pycache__"})  # a snapshot leaves these out: not needed to migrate
_MACOS_FORKS = "__MACOSX"  # Finder's resource forks in a zip: skipped, not part of the repository
NOT_ARCHIVE = "expected a tar.gz or zip archive"
NO_ROOTS = "this server allows no server paths; upload an archive or start it with --allow-root DIR"


class UploadLimits(BaseModel):
    """What one session's source may hold (`ferry serve`'s upload limits)."""

    model_config = ConfigDict(frozen=True)

    max_bytes: int = Field(50 * 1024**2, gt=0)  # the archive itself
    max_files: int = Field(5000, gt=0)  # members that are files (also the cap on directories)
    max_unpacked_bytes: int = Field(500 * 1024**2, gt=0)  # bytes written, counted while writing
    max_ratio: float = Field(100.0, gt=0)  # unpacked / packed: above it, a bomb


class SourceRefused(ValueError):
    """The upload or path is not accepted; the message says what was wrong and what to do."""


def _show(name: str) -> str:
    """A member name as it may appear in a message (and so in a log): ASCII-escaped and cut short."""
    return ascii(name if len(name) <= 120 else name[:120] + "...")


def _parts(name: str) -> tuple[str, ...]:
    """The relative path a member name stands for, or SourceRefused for a name that is a trick."""
    if any(ord(c) < 32 for c in name):
        raise SourceRefused(f"member {_show(name)} has a NUL or control character in its name; rename it")
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise SourceRefused(f"member {_show(name)} has a name that is not valid UTF-8; rename it") from None
    if "\\" in name:
        raise SourceRefused(f"member {_show(name)} has a backslash in its name; re-create the archive with '/'")
    if name.startswith("/"):
        raise SourceRefused(f"member {_show(name)} has an absolute name; use `tar czf repo.tgz -C parent repo`")
    parts = tuple(p for p in name.split("/") if p not in ("", "."))
    if ".." in parts:
        raise SourceRefused(f"member {_show(name)} has a '..' part, which could write outside the repository")
    if len(parts) > MAX_DEPTH or any(len(p.encode()) > 255 for p in parts):
        raise SourceRefused(f"member {_show(name)} is nested deeper than {MAX_DEPTH} or has a name over 255 bytes")
    return parts


class _Writer:
    """Creates files and directories under root, counting against the limits (the ratio: an archive's)."""

    def __init__(self, root: Path, limits: UploadLimits, packed: int | None) -> None:
        self.root, self.limits, self.packed = root, limits, packed
        self.packed_size = packed or 0
        self.files: set[tuple[str, ...]] = set()
        self.dirs: set[tuple[str, ...]] = set()
        self.written = 0

    def _claim(self, parts: tuple[str, ...], is_dir: bool) -> None:
        shown = _show("/".join(parts))
        if parts in self.files or (parts in self.dirs and not is_dir) or any(
                parts[:i] in self.files for i in range(1, len(parts))):
            raise SourceRefused(f"{shown} appears twice (or as a file and a directory); each path may be once")
        if not is_dir and len(self.files) >= self.limits.max_files:
            raise SourceRefused(f"more than {self.limits.max_files} files; the limit is {self.limits.max_files} "
                                "(leave out data, build outputs and virtual environments)")
        (self.dirs if is_dir else self.files).add(parts)
        self.dirs.update(parts[:i] for i in range(1, len(parts)))
        if len(self.dirs) > self.limits.max_files:
            raise SourceRefused(f"more than {self.limits.max_files} directories; the limit is {self.limits.max_files}")

    def _mkdirs(self, parts: tuple[str, ...]) -> None:
        for i in range(1, len(parts) + 1):
            path = self.root.joinpath(*parts[:i])
            try:
                os.mkdir(path, 0o755)
            except FileExistsError:
                continue
            os.chmod(path, 0o755)

    def mkdir(self, parts: tuple[str, ...]) -> None:
        self._claim(parts, is_dir=True)
        self._mkdirs(parts)

    def write(self, parts: tuple[str, ...], src: IO[bytes], executable: bool) -> None:
        self._claim(parts, is_dir=False)
        self._mkdirs(parts[:-1])
        fd = os.open(self.root.joinpath(*parts), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as out:
            while chunk := src.read(_CHUNK):
                self.written += len(chunk)
                self._check_size()
                out.write(chunk)
            os.fchmod(out.fileno(), 0o755 if executable else 0o644)

    def _check_size(self) -> None:
        limit = self.limits.max_unpacked_bytes
        if self.written > limit:
            raise SourceRefused(f"the files add up to more than {limit} bytes, the limit "
                                "(leave out data, build outputs and virtual environments)")
        if self.packed is not None and self.written > max(RATIO_FLOOR, self.limits.max_ratio * self.packed):
            raise SourceRefused(f"the archive unpacks to more than {self.limits.max_ratio:g} times its size; "
                                "refused as a likely archive bomb")


def _check_kind(name: str, link: str | None, special: bool) -> None:
    if link:
        raise SourceRefused(f"member {_show(name)} is a {link} link; links are refused in uploads: "
                            "replace it by the file it points to")
    if special:
        raise SourceRefused(f"member {_show(name)} is a device file, fifo or other special file; "
                            "only regular files and directories are accepted")


def _empty(dest: Path) -> None:
    for child in dest.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()


class _Capped:
    """The (decompressed) tar stream as tarfile reads it, refused past `cap` bytes, so that skipping or
    reading headers of a bomb costs bounded time and memory (member data is also counted by _Writer)."""

    def __init__(self, raw: gzip.GzipFile | io.BufferedReader, cap: int) -> None:
        self.raw, self.cap = raw, cap

    def _check(self, position: int) -> None:
        if position > self.cap:
            raise SourceRefused(f"the tar stream runs past {self.cap} bytes (the unpacked-size and ratio "
                                "limits); refused as a likely archive bomb")

    def read(self, n: int = -1) -> bytes:
        if n < 0 or n > MAX_HEADER:
            raise SourceRefused(f"the tar has a header over {MAX_HEADER} bytes; re-create the archive with tar")
        data = self.raw.read(n)
        self._check(self.raw.tell())
        return data

    def seek(self, position: int, whence: int = io.SEEK_SET) -> int:
        target = position + (self.raw.tell() if whence == io.SEEK_CUR else 0)
        self._check(target)
        return self.raw.seek(target)

    def tell(self) -> int:
        return self.raw.tell()


def _untar(archive: Path, gzipped: bool, w: _Writer) -> None:
    limits, packed = w.limits, w.packed or 0
    data = min(limits.max_unpacked_bytes, max(RATIO_FLOOR, int(limits.max_ratio * packed)))
    cap = data + 2048 * (2 * limits.max_files + 16)  # headers and padding of the members the limits allow
    try:
        with (gzip.open(archive, "rb") if gzipped else open(archive, "rb")) as raw, \
                tarfile.open(fileobj=_Capped(raw, cap), mode="r:", encoding="utf-8") as tf:  # type: ignore[call-overload]
            for member in tf:
                parts = _parts(member.name)
                link = "symbolic" if member.issym() else "hard" if member.islnk() else None
                _check_kind(member.name, link, special=not (member.isreg() or member.isdir()))
                if hasattr(tarfile, "data_filter"):  # Python >= 3.11.4; the checks above are a superset of it
                    try:
                        tarfile.data_filter(member, str(w.root))
                    except tarfile.FilterError as exc:
                        raise SourceRefused(f"member {_show(member.name)} is refused: {exc}") from None
                if not parts or parts[0] == _MACOS_FORKS or not SKIPPED.isdisjoint(parts):
                    continue  # .git (its config runs commands: core.fsmonitor, hooks) and caches: never unpacked
                if member.isdir():
                    w.mkdir(parts)
                    continue
                src = tf.extractfile(member)
                if src is None:
                    raise SourceRefused(f"member {_show(member.name)} has no readable contents")
                with src:
                    w.write(parts, src, executable=bool(member.mode & 0o111))
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise SourceRefused(f"{NOT_ARCHIVE}; this one could not be read as a tar ({exc})") from None


def _zip_name(info: zipfile.ZipInfo) -> str:
    """The member's full stored name (zipfile's `filename` is cut at a NUL), decoded as UTF-8."""
    if info.flag_bits & 0x800:
        return info.orig_filename
    try:
        return info.orig_filename.encode("cp437").decode("utf-8")
    except UnicodeDecodeError:
        raise SourceRefused(f"member {_show(info.orig_filename)} has a name that is not valid UTF-8") from None


def _unzip(archive: Path, w: _Writer) -> None:
    try:
        with zipfile.ZipFile(archive) as zf:
            for info in zf.infolist():
                name = _zip_name(info)
                parts = _parts(name)
                mode = info.external_attr >> 16
                _check_kind(name, "symbolic" if stat.S_ISLNK(mode) else None,
                            special=bool(stat.S_IFMT(mode)) and not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)))
                if info.flag_bits & 0x1:
                    raise SourceRefused(f"member {_show(name)} is encrypted; upload an archive without a password")
                if not 0 <= info.header_offset < w.packed_size:  # zipfile would seek there (EINVAL when < 0)
                    raise SourceRefused(f"{NOT_ARCHIVE}; this zip is damaged (member {_show(name)} lies outside it)")
                if not parts or parts[0] == _MACOS_FORKS or not SKIPPED.isdisjoint(parts):
                    continue  # as for tar: no .git, no caches
                if info.is_dir() or stat.S_ISDIR(mode):
                    w.mkdir(parts)
                    continue
                with zf.open(info) as src:
                    w.write(parts, src, executable=bool(mode & 0o111))
    except UnicodeDecodeError:
        raise SourceRefused("a member's name is marked UTF-8 but is not valid UTF-8; rename it") from None
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError) as exc:
        raise SourceRefused(f"{NOT_ARCHIVE}; this zip could not be read ({exc})") from None


def _promote(staging: Path, dest: Path) -> None:
    """Move what was unpacked into dest, a single top-level directory (repo-main/...) stripped."""
    entries = list(staging.iterdir())
    top = entries[0] if len(entries) == 1 and stat.S_ISDIR(os.lstat(entries[0]).st_mode) else staging
    for child in list(top.iterdir()):
        os.rename(child, dest / child.name)
    shutil.rmtree(staging)


def extract_archive(archive: Path, dest: Path, limits: UploadLimits) -> int:
    """Unpack a .tar, .tar.gz/.tgz or .zip (told by its magic bytes, not its name) into dest (an empty dir
    the caller created); return the number of files.

    Refused (SourceRefused, dest left empty): an archive over max_bytes, anything else than a tar, a
    gzipped tar or a zip; absolute names, '..' parts, backslashes, NUL/control characters or names that
    are not UTF-8; every link member, symbolic or hard, wherever it points (refused outright, so nothing
    is ever written through one); device files, fifos and other special members; encrypted zip members;
    a path given twice (or as both a file and a directory); more than max_files files (or directories);
    more than max_unpacked_bytes written or, once RATIO_FLOOR bytes are written, more than max_ratio
    times the archive's size (both counted while writing, headers are not trusted); a decompressed tar
    stream past those limits or with a header over MAX_HEADER; no file at all. Tar members also go
    through tarfile's `data` filter (where the Python has it, 3.11.4 on). A single top-level directory
    is stripped so the repository's root is dest itself; `__MACOSX/` entries are skipped. Files get
    0644, or 0755 when the member had an executable bit; directories 0755.
    """
    size = archive.stat().st_size
    if size > limits.max_bytes:
        raise SourceRefused(f"the archive is {size} bytes, over the limit of {limits.max_bytes} bytes")
    if any(dest.iterdir()):
        raise ValueError(f"{dest} must be an empty directory")
    with open(archive, "rb") as fh:
        head = fh.read(512)
    staging = Path(tempfile.mkdtemp(prefix=".ferry-unpack-", dir=dest))
    writer = _Writer(staging, limits, packed=size)
    try:
        if head[:4] in (b"PK\x03\x04", b"PK\x05\x06"):
            _unzip(archive, writer)
        elif head[:2] == b"\x1f\x8b" or head[257:262] == b"ustar":
            _untar(archive, head[:2] == b"\x1f\x8b", writer)
        else:
            raise SourceRefused(f"{NOT_ARCHIVE} (.tar.gz, .tgz, .tar or .zip); this file is none of them")
        if not writer.files:
            raise SourceRefused("the archive holds no files")
        _promote(staging, dest)
    except BaseException:
        _empty(dest)
        raise
    logger.info("unpacked %d files (%d bytes) from a %d-byte archive", len(writer.files), writer.written, size)
    return len(writer.files)


def resolve_allowed(path: str, roots: Sequence[Path]) -> Path:
    """The real directory a JSON create names, when it lies under one of the allow-roots.

    Both sides are compared after resolving their symlinks, so a symlink inside a root that points out
    (to /etc, say) is refused, and a root that is itself a symlink counts as its target. Refused
    (SourceRefused): no roots configured; a path that is empty, relative, has a NUL or a '..' part; one
    outside every root (checked before whether it exists, so nothing is said about paths outside); one
    that is not a directory. The messages name the allowed roots.
    """
    if not roots:
        raise SourceRefused(NO_ROOTS)
    real_roots = [Path(os.path.realpath(root)) for root in roots]
    allowed = ", ".join(str(root) for root in real_roots)
    if not path or "\x00" in path or not Path(path).is_absolute():
        raise SourceRefused(f"path must be an absolute directory under an allowed root ({allowed})")
    if ".." in Path(path).parts:
        raise SourceRefused(f"path must not have '..' parts; name a directory under an allowed root ({allowed})")
    real = Path(os.path.realpath(path))
    problem = repo_path_problem(real)
    if problem is not None:
        raise SourceRefused(problem)
    if not any(real == root or real.is_relative_to(root) for root in real_roots):
        raise SourceRefused(f"{_show(path)} is not under an allowed root ({allowed}); "
                            "name a directory under one of them or upload an archive")
    if not real.is_dir():
        raise SourceRefused(f"{_show(path)} is not a directory under an allowed root ({allowed})")
    return real


def _check_shared(mode: int, shown: str) -> None:
    """Only what every user of the server may read is copied: the session's copy is readable by the sandbox's
    user and comes back in /archive, so a file or directory closed to others (0700, 0600: a secret, even one
    inside an allowed root) is refused, never republished."""
    need = (stat.S_IROTH | stat.S_IXOTH) if stat.S_ISDIR(mode) else stat.S_IROTH
    if mode & need != need:
        raise SourceRefused(f"{shown} is not readable by every user (mode {stat.S_IMODE(mode):04o}); the server "
                            "copies only what it may show to any client: chmod o+r (o+rx for a directory) "
                            "or leave it out")


def _copy_dir(dfd: int, rel: tuple[str, ...], real_src: str, w: _Writer) -> None:
    with os.scandir(dfd) as it:
        names = sorted(entry.name for entry in it)
    for name in names:
        if name in SKIPPED:
            continue
        parts = (*rel, name)
        shown = _show("/".join(parts))
        try:
            mode = os.stat(name, dir_fd=dfd, follow_symlinks=False).st_mode
        except FileNotFoundError:  # removed since it was listed
            continue
        if stat.S_ISLNK(mode):
            target = os.path.realpath(os.path.join(real_src, *rel, os.readlink(name, dir_fd=dfd)))
            if not Path(target).is_relative_to(real_src):
                raise SourceRefused(f"{shown} is a link to outside the directory; replace it by a copy of "
                                    "what it points to (links inside the directory are skipped)")
            logger.info("snapshot: skipped the link %s (it points inside the tree)", shown)
            continue
        if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
            logger.info("snapshot: skipped the special file %s (fifo, socket or device)", shown)
            continue
        _check_shared(mode, shown)
        flags = os.O_RDONLY | os.O_NOFOLLOW | (os.O_DIRECTORY if stat.S_ISDIR(mode) else os.O_NONBLOCK)
        try:
            fd = os.open(name, flags, dir_fd=dfd)
        except PermissionError:
            raise SourceRefused(f"{shown} is not readable by the server; make it readable or leave it out") from None
        except OSError as exc:  # ELOOP, ENOTDIR, ENOENT: swapped or removed since it was listed
            raise SourceRefused(f"{shown} changed while it was copied ({exc.strerror}); try again") from None
        if stat.S_ISDIR(mode):
            try:
                w.mkdir(parts)
                _copy_dir(fd, parts, real_src, w)
            finally:
                os.close(fd)
            continue
        with os.fdopen(fd, "rb") as fh:
            opened = os.fstat(fh.fileno()).st_mode
            if not stat.S_ISREG(opened):  # swapped for something else since it was listed
                logger.info("snapshot: skipped %s (no longer a regular file)", shown)
                continue
            w.write(parts, fh, executable=bool(opened & 0o111))


def _open_real(real: str) -> int:
    """A directory fd for a real path, opened component by component with O_NOFOLLOW: a directory on the
    way swapped for a link after the path was resolved is refused (ELOOP), never followed."""
    fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in Path(real).parts[1:]:
            inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd


def snapshot_tree(src: Path, dest: Path, limits: UploadLimits) -> int:
    """Copy the allowed directory src into dest (the session's frozen copy); return the file count.

    Regular files and directories only, walked through directory file descriptors and opened with
    O_NOFOLLOW, so no link is followed, even one swapped in mid-copy. `.git` and `__pycache__` are left
    out. A link that resolves inside src is skipped (its target is copied where it lies); a link that
    leaves src is refused. Fifos, sockets and devices are skipped. Refused (SourceRefused, dest left
    empty): src not a readable directory, or a link; a file or directory the server cannot read
    (named); more than max_files files or more than max_unpacked_bytes. dest: an empty or absent directory.
    """
    real_src = os.path.realpath(src)
    try:
        if os.path.islink(src):
            raise OSError(0, "it is a symbolic link; pass the directory it points to")
        top = _open_real(real_src)
    except OSError as exc:
        raise SourceRefused(f"{_show(str(src))} is not a directory the server can read ({exc.strerror})") from None
    dest.mkdir(parents=True, exist_ok=True)
    try:
        if any(dest.iterdir()):
            raise ValueError(f"{dest} must be an empty directory")
        writer = _Writer(dest, limits, packed=None)
        try:
            _check_shared(os.fstat(top).st_mode, _show(str(src)))
            _copy_dir(top, (), real_src, writer)
        except BaseException:
            _empty(dest)
            raise
    finally:
        os.close(top)
    logger.info("snapshot: copied %d files (%d bytes)", len(writer.files), writer.written)
    return len(writer.files)
