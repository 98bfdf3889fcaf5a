"""The host's one way into what a sandboxed run could have written. Standard library only.

A run can leave anything in the directories it may write: symlinks to host files (or to host
paths that do not exist yet), hard links, FIFOs, sparse files of any size, directories swapped
for links. Ferry often runs as root, so following any of that reads or writes what the run
chose. Everything here:

* opens relative to a directory descriptor, every component with ``O_NOFOLLOW`` (directories
  with ``O_DIRECTORY``): no link is followed, at the leaf or above it;
* accepts regular files only (``fstat`` after an ``O_NONBLOCK`` open, so a FIFO never blocks),
  and refuses hard links (``st_nlink > 1``: the name may be a second name of a host file);
* checks sizes on ``fstat`` before reading and never reads more than the cap, so a huge sparse
  file is refused without being read;
* ``collect`` copies what it accepts into a host-owned directory (made here, 0700, never bound
  into a sandbox) before anything parses it; every refusal is kept with its reason.

``write_text`` is the host's write side: atomic (a new file renamed into place, so a link
planted under the name is replaced, never followed) and only into a directory this user owns.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from sandbox.envvars import env_int

logger = logging.getLogger(__name__)

MAX_FILE_ENV = "FERRY_ARTIFACT_MAX_FILE_BYTES"
MAX_TOTAL_ENV = "FERRY_ARTIFACT_MAX_TOTAL_BYTES"
MAX_FILES_ENV = "FERRY_ARTIFACT_MAX_FILES"
MAX_JSON_VALUES_ENV = "FERRY_ARTIFACT_MAX_JSON_VALUES"
# A probe chunk holds at most the probe budget (FERRY_PROBE_MAX_BYTES, 64 MiB by default) and a
# Chrome trace of a profiled window can be tens of MB: the per-file cap leaves room for both.
DEFAULT_MAX_FILE_BYTES = 256 * 1024**2
DEFAULT_MAX_TOTAL_BYTES = 1024**3
DEFAULT_MAX_FILES = 10_000
# Parsed and validated, a small JSON value costs the host about a kilobyte (the parsed object, its
# model, the dicts kept): 14 MiB of tiny probe events took 700 MB, the per-file cap would allow some
# 13 GB. A probe index of a large model (2 steps, thousands of module calls, 100 000 values per
# scalar stream) holds well under a million. Enforced by the JSON readers (tools.artifact_json).
DEFAULT_MAX_JSON_VALUES = 2_000_000
MAX_DEPTH = 16
# The run chooses how many entries are refused (up to the file count) and how long their paths are
# (16 levels of 255-byte names): what is kept of the refusals, and logged, is bounded.
MAX_REFUSALS = 100
MAX_REFUSALS_LOGGED = 20
MAX_SHOWN_PATH = 300
_CHUNK = 1 << 20

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class ArtifactRefused(ValueError):
    """A file a run could have written was not read: ``path`` (relative) and why (``reason``)."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: refused ({reason})")


class ArtifactMissing(ArtifactRefused):
    """The artifact does not exist (the run did not write it)."""

    def __init__(self, path: str) -> None:
        super().__init__(path, "missing")


@dataclass(frozen=True)
class Refusal:
    path: str  # relative to the collected directory, "/"-separated
    reason: str


@dataclass(frozen=True)
class ArtifactLimits:
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES
    max_total_bytes: int = DEFAULT_MAX_TOTAL_BYTES
    max_files: int = DEFAULT_MAX_FILES
    max_json_values: int = DEFAULT_MAX_JSON_VALUES

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> ArtifactLimits:
        """The caps from ``FERRY_ARTIFACT_MAX_*`` on the host; a bad value is a ValueError
        naming the variable."""
        env = dict(os.environ if env is None else env)
        return cls(max_file_bytes=_env_count(env, MAX_FILE_ENV, DEFAULT_MAX_FILE_BYTES),
                   max_total_bytes=_env_count(env, MAX_TOTAL_ENV, DEFAULT_MAX_TOTAL_BYTES),
                   max_files=_env_count(env, MAX_FILES_ENV, DEFAULT_MAX_FILES),
                   max_json_values=_env_count(env, MAX_JSON_VALUES_ENV, DEFAULT_MAX_JSON_VALUES))


def _env_count(env: dict[str, str], key: str, default: int) -> int:
    return env_int(key, default, env, minimum=1, expected="a positive whole number",
                   hint=f"; give a count such as {default} (or unset it for the default)")


@dataclass
class Collected:
    """What ``collect`` copied into ``dest`` (relative paths) and what it refused, with why."""

    dest: Path
    accepted: list[str] = field(default_factory=list)
    refused: list[Refusal] = field(default_factory=list)
    bytes_copied: int = 0

    def has(self, relpath: str) -> bool:
        return relpath in self.accepted


# ------------------------------------------------------------------------------ helpers


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "fifo"), (stat.S_ISSOCK, "socket"), (stat.S_ISCHR, "character device"),
                       (stat.S_ISBLK, "block device"), (stat.S_ISDIR, "directory"), (stat.S_ISLNK, "symlink")):
        if test(mode):
            return name
    return "unknown type"


def _display(name: str) -> str:
    """A name as text that survives JSON (undecodable bytes shown as escapes)."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _join(parent: str, name: str) -> str:
    return f"{parent}/{name}" if parent else name


def _split(relpath: str) -> list[str]:
    """The components of a plain relative path; anything else is refused."""
    parts = relpath.split("/") if isinstance(relpath, str) else []
    if not parts or relpath.startswith("/") or "\0" in relpath or any(p in ("", ".", "..") for p in parts):
        raise ArtifactRefused(str(relpath), "not a plain relative path (no '..', no leading '/')")
    return parts


def _is_link(name: str | Path, dir_fd: int | None = None) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _open_base(base: Path, shown: str) -> int:
    try:
        return os.open(base, _DIR_FLAGS)
    except FileNotFoundError:
        raise ArtifactMissing(shown) from None
    except OSError as exc:
        # O_DIRECTORY|O_NOFOLLOW on a symlink fails with ENOTDIR on Linux (ELOOP elsewhere)
        if exc.errno == errno.ELOOP or (exc.errno == errno.ENOTDIR and _is_link(base)):
            raise ArtifactRefused(shown, f"directory {base} is a symlink") from None
        if exc.errno == errno.ENOTDIR:
            raise ArtifactRefused(shown, f"{base} is not a directory") from None
        raise ArtifactRefused(shown, f"cannot open {base}: {exc.strerror}") from None


def _open_dir_at(dir_fd: int, name: str, shown: str) -> int:
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        raise ArtifactMissing(shown) from None
    except OSError as exc:
        if exc.errno == errno.ELOOP or (exc.errno == errno.ENOTDIR and _is_link(name, dir_fd)):
            raise ArtifactRefused(shown, "directory is a symlink") from None
        if exc.errno == errno.ENOTDIR:
            raise ArtifactRefused(shown, "not a directory") from None
        raise ArtifactRefused(shown, f"unreadable: {exc.strerror}") from None
    return fd


def _open_file_at(dir_fd: int, name: str, shown: str, max_bytes: int) -> tuple[int, os.stat_result]:
    """An fd of a regular, singly linked file of at most ``max_bytes``; refused otherwise."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        raise ArtifactMissing(shown) from None
    except OSError as exc:
        raise ArtifactRefused(shown, f"unreadable: {exc.strerror}") from None
    if stat.S_ISLNK(st.st_mode):
        raise ArtifactRefused(shown, "symlink")
    if not stat.S_ISREG(st.st_mode):  # never opened: opening a device or FIFO can have effects
        raise ArtifactRefused(shown, f"not a regular file ({_kind(st.st_mode)})")
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ArtifactRefused(shown, "symlink") from None
        raise ArtifactRefused(shown, f"unreadable: {exc.strerror}") from None
    try:
        st = os.fstat(fd)  # what was opened, not what the name pointed at a moment ago
        if not stat.S_ISREG(st.st_mode):
            raise ArtifactRefused(shown, f"not a regular file ({_kind(st.st_mode)})")
        if st.st_nlink > 1:
            raise ArtifactRefused(shown, "hard link to another file")
        if st.st_size > max_bytes:
            raise ArtifactRefused(shown, f"too large: {st.st_size} bytes > cap {max_bytes}")
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def _chunks(fd: int, size: int, shown: str) -> Iterator[bytes]:
    """The ``size`` bytes fstat promised, in chunks (fewer if it shrank); refused if it grew."""
    left = size
    while left > 0:
        chunk = os.read(fd, min(_CHUNK, left))
        if not chunk:
            break
        left -= len(chunk)
        yield chunk
    if os.read(fd, 1):
        raise ArtifactRefused(shown, "changed while being read (grew past its size)")


# ------------------------------------------------------------------------------ readers


def _open_leaf(base: Path, relpath: str, max_bytes: int) -> tuple[int, os.stat_result]:
    parts = _split(relpath)
    fd = _open_base(Path(base), relpath)
    try:
        for i, part in enumerate(parts[:-1]):
            nxt = _open_dir_at(fd, part, "/".join(parts[: i + 1]))
            os.close(fd)
            fd = nxt
        return _open_file_at(fd, parts[-1], relpath, max_bytes)
    finally:
        os.close(fd)


def read_bytes(base: Path | str, relpath: str, *, max_bytes: int) -> bytes:
    """The bytes of ``base/relpath`` read without following any link below ``base``.

    Raises ``ArtifactMissing`` when it does not exist and ``ArtifactRefused`` for a link, a
    non-regular file, a hard link, or a file over ``max_bytes`` (checked before reading)."""
    fd, st = _open_leaf(Path(base), relpath, max_bytes)
    try:
        return b"".join(_chunks(fd, st.st_size, relpath))
    finally:
        os.close(fd)


def read_text(base: Path | str, relpath: str, *, max_bytes: int, errors: str = "replace") -> str:
    """``read_bytes`` decoded as UTF-8 (undecodable bytes replaced by default)."""
    return read_bytes(base, relpath, max_bytes=max_bytes).decode("utf-8", errors)


def is_regular_file(base: Path | str, relpath: str) -> bool:
    """Whether ``base/relpath`` is a regular, singly linked file reachable without links."""
    try:
        fd, _ = _open_leaf(Path(base), relpath, max_bytes=1 << 62)
    except ArtifactRefused:
        return False
    os.close(fd)
    return True


# ------------------------------------------------------------------------------ collect


class _Walk:
    def __init__(self, dest: Path, max_file_bytes: int, max_total_bytes: int, max_files: int) -> None:
        self.out = Collected(dest=dest)
        self.max_file_bytes = max_file_bytes
        self.max_total_bytes = max_total_bytes
        self.max_files = max_files
        self.seen = 0
        self.stopped = False
        self.listed = 0
        self.unlisted = 0

    def refuse(self, path: str, reason: str, *, always: bool = False) -> None:
        """Keep a refusal (the first ``MAX_REFUSALS``, and the ``always`` ones: the caps that stopped the
        walk); the rest are only counted, and summed up in one last entry by ``finish``."""
        if len(path) > MAX_SHOWN_PATH:
            half = MAX_SHOWN_PATH // 2
            path = f"{path[:half]}...{path[-half:]}"
        if self.listed < MAX_REFUSALS or always:
            if self.listed < MAX_REFUSALS_LOGGED:
                logger.warning("run artifact %s refused: %s", path, reason)
            self.listed += 1
            self.out.refused.append(Refusal(path=path, reason=reason))
        else:
            self.unlisted += 1

    def finish(self) -> None:
        if self.listed > MAX_REFUSALS_LOGGED:
            logger.warning("%d more run artifacts refused (listed in the result)", self.listed - MAX_REFUSALS_LOGGED)
        if self.unlisted:
            logger.warning("%d more run artifacts refused, not listed", self.unlisted)
            self.out.refused.append(Refusal(path="...", reason=f"{self.unlisted} more entries refused, not listed "
                                                               f"(the first {MAX_REFUSALS} are)"))

    def directory(self, src_fd: int, dst_fd: int, rel: str, depth: int) -> None:
        with os.scandir(src_fd) as entries:
            names = []
            for entry in entries:
                self.seen += 1
                if self.seen > self.max_files:
                    self.refuse(rel or ".", f"too many files: more than {self.max_files} (the rest was not read; "
                                           f"raise {MAX_FILES_ENV} if they are needed)", always=True)
                    self.stopped = True
                    break
                names.append(entry.name)
        for name in sorted(names):
            if self.stopped:
                return
            shown = _join(rel, _display(name))
            try:
                name.encode("utf-8")
            except UnicodeEncodeError:
                self.refuse(shown, "file name is not valid UTF-8")
                continue
            try:
                st = os.stat(name, dir_fd=src_fd, follow_symlinks=False)
            except OSError as exc:
                self.refuse(shown, f"unreadable: {exc.strerror}")
                continue
            if stat.S_ISDIR(st.st_mode):
                self.subdir(src_fd, dst_fd, name, shown, depth)
            else:
                self.file(src_fd, dst_fd, name, shown)

    def subdir(self, src_fd: int, dst_fd: int, name: str, shown: str, depth: int) -> None:
        if depth >= MAX_DEPTH:
            self.refuse(shown, f"too deep: more than {MAX_DEPTH} directory levels")
            return
        try:
            sub = _open_dir_at(src_fd, name, shown)
        except ArtifactRefused as exc:
            self.refuse(shown, exc.reason)
            return
        try:
            os.mkdir(name, 0o700, dir_fd=dst_fd)
            dst_sub = os.open(name, _DIR_FLAGS, dir_fd=dst_fd)
            try:
                self.directory(sub, dst_sub, shown, depth + 1)
            finally:
                os.close(dst_sub)
        finally:
            os.close(sub)

    def file(self, src_fd: int, dst_fd: int, name: str, shown: str) -> None:
        try:
            fd, st = _open_file_at(src_fd, name, shown, self.max_file_bytes)
        except ArtifactMissing:
            self.refuse(shown, "missing (removed while being collected)")
            return
        except ArtifactRefused as exc:
            hint = f"; raise {MAX_FILE_ENV} if it is needed" if exc.reason.startswith("too large") else ""
            self.refuse(shown, exc.reason + hint)
            return
        try:
            total = self.out.bytes_copied + st.st_size
            if total > self.max_total_bytes:
                self.refuse(shown, f"too large in all: {total} bytes > cap {self.max_total_bytes} ({MAX_TOTAL_ENV})")
            else:
                self.copy(fd, dst_fd, name, shown, st.st_size)
        finally:
            os.close(fd)

    def copy(self, fd: int, dst_fd: int, name: str, shown: str, size: int) -> None:
        """Stream the ``size`` bytes fstat promised into a new file ``name`` under ``dst_fd``: accepted
        when complete; refused, with nothing left behind, when it grew or could not be written."""
        out = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dst_fd)
        copied = 0
        try:
            for chunk in _chunks(fd, size, shown):
                view = memoryview(chunk)
                while view:
                    view = view[os.write(out, view):]
                copied += len(chunk)
        except (ArtifactRefused, OSError) as exc:
            os.close(out)
            os.unlink(name, dir_fd=dst_fd)
            why = exc.reason if isinstance(exc, ArtifactRefused) else f"could not be copied: {exc.strerror}"
            self.refuse(shown, why)
            return
        os.close(out)
        self.out.accepted.append(shown)
        self.out.bytes_copied += copied


def collect(src: Path | str, dest: Path | str, *, max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
            max_total_bytes: int = DEFAULT_MAX_TOTAL_BYTES, max_files: int = DEFAULT_MAX_FILES) -> Collected:
    """Copy the regular files under ``src`` (a directory a run could write) into ``dest``.

    ``dest`` must not exist; it is created here, 0700, owned by this process's user. Links,
    FIFOs, sockets, devices, hard links, files over ``max_file_bytes``, files past
    ``max_total_bytes`` in all or past ``max_files`` entries, and trees deeper than
    ``MAX_DEPTH`` are refused and listed in ``Collected.refused`` with the reason. ``src``
    itself must be a directory, not a link (``ArtifactRefused`` otherwise; ``ArtifactMissing``
    when it does not exist)."""
    src, dest = Path(src), Path(dest)
    src_fd = _open_base(src, ".")
    try:
        os.mkdir(dest, 0o700)
        dst_fd = os.open(dest, _DIR_FLAGS)
        try:
            walk = _Walk(dest, max_file_bytes, max_total_bytes, max_files)
            walk.directory(src_fd, dst_fd, "", 0)
            walk.finish()
        finally:
            os.close(dst_fd)
    finally:
        os.close(src_fd)
    logger.debug("collected %d file(s), %d bytes from %s; refused %d", len(walk.out.accepted),
                 walk.out.bytes_copied, src, len(walk.out.refused))
    return walk.out


# ------------------------------------------------------------------------------ host writes


def write_text(base: Path | str, name: str, text: str) -> Path:
    """Write ``base/name`` atomically: a new file renamed over the name, so a link planted there is
    replaced, never followed. Refused (``ArtifactRefused``) when ``base`` is a link or not owned by
    this user (a directory a sandboxed run was handed)."""
    if not isinstance(name, str) or "/" in name or name in ("", ".", "..") or "\0" in name:
        raise ArtifactRefused(str(name), "not a plain file name")
    base = Path(base)
    fd = _open_base(base, name)
    try:
        owner = os.fstat(fd).st_uid
        if owner != os.geteuid():
            raise ArtifactRefused(name, f"directory {base} belongs to uid {owner}, not to this user: a sandboxed "
                                        "run may write there; write reports to a directory Ferry made")
        tmp = f".{name}.{uuid.uuid4().hex}.tmp"
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=fd)
        try:
            with os.fdopen(out, "w", encoding="utf-8") as fh:
                fh.write(text)
            os.replace(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=fd)
            except OSError:
                pass
            raise
    finally:
        os.close(fd)
    return base / name
