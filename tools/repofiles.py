"""The one way Ferry reads the user's repository (and the workspaces copied from it). Standard library only.

A repository is not trusted: it can hold a FIFO named ``x.py`` (a blocking open waits forever), a device,
a symlink to a host file (``y.py -> /etc/passwd``; Ferry may run as root) or through a symlinked
directory, or a file of gigabytes. Every read here:

* walks from the repository's root one component at a time, each directory opened with
  ``O_DIRECTORY | O_NOFOLLOW`` relative to the one above: no link is followed, above the leaf or at it;
* opens the leaf with ``O_NOFOLLOW | O_NONBLOCK`` (a FIFO never blocks) and accepts it only when
  ``fstat`` of what was opened says regular file;
* checks the size before reading and never reads more than the cap (``head=True``: the first bytes);
* decodes text as UTF-8 or says it is not.

What is refused raises :class:`RepoFileError` with its ``kind`` and a message that names the file;
:func:`read_text_or_none` logs the refusals that matter (special files, links, size) and returns None.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
from pathlib import Path

logger = logging.getLogger(__name__)

MAX_REPO_FILE_BYTES = 2_000_000
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_CHUNK = 1 << 20
# refusals worth a warning (a missing file, or one that is not UTF-8, is ordinary)
WARN_KINDS = frozenset({"symlink", "special", "too_large", "bad_path"})


class RepoFileError(ValueError):
    """A repository file Ferry will not read; ``kind``: missing, symlink, special, too_large, unreadable,
    not_text or bad_path."""

    def __init__(self, rel: str, kind: str, reason: str) -> None:
        super().__init__(f"{rel}: {reason}")
        self.rel, self.kind, self.reason = rel, kind, reason


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a directory"), (stat.S_ISLNK, "a symlink")):
        if test(mode):
            return name
    return "not a regular file"


def _parts(rel: str) -> list[str]:
    parts = rel.replace("\\", "/").split("/")
    if not rel or rel.startswith("/") or "\0" in rel or any(p in ("", ".", "..") for p in parts):
        raise RepoFileError(rel, "bad_path", "not a plain relative path inside the repository")
    return parts


def _open_dir(name: str, dir_fd: int | None, rel: str) -> int:
    try:
        return os.open(name, _DIR_FLAGS if dir_fd is not None else os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC,
                       dir_fd=dir_fd)
    except FileNotFoundError:
        raise RepoFileError(rel, "missing", "does not exist") from None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR) and dir_fd is not None and _is_link(name, dir_fd):
            raise RepoFileError(rel, "symlink", f"its directory {name!r} is a symlink; Ferry does not follow "
                                                "links in the repository") from None
        if exc.errno == errno.ENOTDIR:
            raise RepoFileError(rel, "missing", f"{name!r} is not a directory") from None
        raise RepoFileError(rel, "unreadable", f"cannot be opened ({exc.strerror})") from None


def _is_link(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _open_leaf(root: Path, rel: str, max_bytes: int, head: bool) -> tuple[int, int]:
    """An fd of the regular file ``root/rel`` and how many bytes to read from it."""
    parts = _parts(rel)
    fd = _open_dir(str(root), None, rel)
    try:
        for part in parts[:-1]:
            inner = _open_dir(part, fd, rel)
            os.close(fd)
            fd = inner
        name = parts[-1]
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            raise RepoFileError(rel, "missing", "does not exist") from None
        except OSError as exc:
            raise RepoFileError(rel, "unreadable", f"cannot be read ({exc.strerror})") from None
        if stat.S_ISLNK(st.st_mode):
            raise RepoFileError(rel, "symlink", "is a symlink; Ferry does not follow links in the repository")
        if not stat.S_ISREG(st.st_mode):  # never opened: opening a FIFO or a device can block or have effects
            raise RepoFileError(rel, "special", f"is {_kind(st.st_mode)}, not a regular file")
        try:
            leaf = os.open(name, _FILE_FLAGS, dir_fd=fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise RepoFileError(rel, "symlink", "is a symlink; Ferry does not follow links in the "
                                                    "repository") from None
            raise RepoFileError(rel, "unreadable", f"cannot be read ({exc.strerror})") from None
    finally:
        os.close(fd)
    try:
        st = os.fstat(leaf)  # what was opened, not what the name pointed at a moment ago
        if not stat.S_ISREG(st.st_mode):
            raise RepoFileError(rel, "special", f"is {_kind(st.st_mode)}, not a regular file")
        if st.st_size > max_bytes and not head:
            raise RepoFileError(rel, "too_large", f"is {st.st_size} bytes, over the {max_bytes}-byte limit for "
                                                  "a repository file")
    except BaseException:
        os.close(leaf)
        raise
    return leaf, min(st.st_size, max_bytes)


def read_bytes(root: str | os.PathLike[str], rel: str, *, max_bytes: int = MAX_REPO_FILE_BYTES,
               head: bool = False) -> bytes:
    """The bytes of the regular file ``root/rel`` (``rel``: '/'-separated, inside the repository), read
    without following any link below ``root``. Over ``max_bytes`` it is refused, or with ``head`` only its
    first ``max_bytes`` are read. :class:`RepoFileError` for what is refused."""
    fd, size = _open_leaf(Path(root), rel, max_bytes, head)
    try:
        chunks, left = [], size
        while left > 0:
            chunk = os.read(fd, min(_CHUNK, left))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        if not head and os.read(fd, 1):
            raise RepoFileError(rel, "too_large", "grew while it was read")
        return b"".join(chunks)
    except OSError as exc:
        raise RepoFileError(rel, "unreadable", f"cannot be read ({exc.strerror})") from None
    finally:
        os.close(fd)


def read_text(root: str | os.PathLike[str], rel: str, *, max_bytes: int = MAX_REPO_FILE_BYTES) -> str:
    """:func:`read_bytes` decoded as UTF-8; ``not_text`` when it is not UTF-8."""
    data = read_bytes(root, rel, max_bytes=max_bytes)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RepoFileError(rel, "not_text", f"is not UTF-8 text (byte {exc.start}); re-encode it as UTF-8") from None


def read_text_or_none(root: str | os.PathLike[str], rel: str, *,
                      max_bytes: int = MAX_REPO_FILE_BYTES) -> str | None:
    """:func:`read_text`, or None for a file that is refused (logged when it is a link, a special file or
    too large: those are skipped, never read)."""
    try:
        return read_text(root, rel, max_bytes=max_bytes)
    except RepoFileError as exc:
        if exc.kind in WARN_KINDS:
            logger.warning("skipping %s", exc)
        return None


def split(path: str | os.PathLike[str], root: str | os.PathLike[str] | None = None) -> tuple[Path, str]:
    """``(root, rel)`` for a file path: ``rel`` relative to ``root`` when given (the path must be inside it),
    else the file's own directory and name."""
    p = Path(path)
    if root is not None:
        try:
            return Path(root), p.relative_to(root).as_posix()
        except ValueError:
            raise RepoFileError(str(path), "bad_path", f"is not inside {root}") from None
    return p.parent, p.name


def is_plain_file(root: str | os.PathLike[str], rel: str) -> bool:
    """Whether ``root/rel`` is a regular file reachable without links (never opened: a FIFO is not read)."""
    try:
        parts = _parts(rel)
    except RepoFileError:
        return False
    here = Path(root)
    for i, part in enumerate(parts):
        try:
            mode = os.lstat(here / part).st_mode
        except OSError:
            return False
        if i < len(parts) - 1 and not stat.S_ISDIR(mode):
            return False
        here = here / part
    return stat.S_ISREG(mode)
