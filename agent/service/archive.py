"""The migrated repository as a tar.gz stream: built while it is sent, never whole in memory.

A producer thread writes the archive (``tarfile`` in stream mode) into a bounded queue of chunks and
the response reads them as they come, so a download holds at most ``QUEUE_CHUNKS`` chunks of the
archive at a time, whatever the repository's size. At most ``MAX_BUILDS`` archives are built at once
(the next download is answered 429); a client that goes away stops its build, and so does one that
stops reading: a build whose next chunk is not taken within ``STALL_S`` gives its slot back (a client
holding two downloads open without reading would otherwise keep every other download at 429).
"""

from __future__ import annotations

import io
import logging
import os
import queue
import stat
import tarfile
import threading
import weakref
from collections.abc import Iterator, Mapping
from pathlib import Path

logger = logging.getLogger(__name__)

CHUNK = 256 * 1024
QUEUE_CHUNKS = 8
MAX_BUILDS = 2
_PUT_WAIT_S = 0.5
STALL_S = 60.0
_SLOTS = threading.BoundedSemaphore(MAX_BUILDS)


class Busy(Exception):
    """Every archive slot is taken."""


class _Cancelled(Exception):
    """The reader went away."""


class _Sink:
    """A write-only file for tarfile: full chunks go to the queue (waiting while it is full)."""

    def __init__(self, chunks: queue.Queue[bytes | None], stop: threading.Event) -> None:
        self.chunks, self.stop, self.buf = chunks, stop, bytearray()
        self.stalled = False

    def write(self, data: bytes) -> int:
        self.buf += data
        while len(self.buf) >= CHUNK:
            self._put(bytes(self.buf[:CHUNK]))
            del self.buf[:CHUNK]
        return len(data)

    def flush(self) -> None:
        if self.buf:
            self._put(bytes(self.buf))
            self.buf.clear()

    def _put(self, chunk: bytes | None) -> None:
        waited = 0.0
        while True:
            if self.stop.is_set():
                raise _Cancelled
            if waited >= STALL_S:
                logger.info("an archive download stopped reading for %.0f s: its build is stopped", waited)
                self.stalled = True
                raise _Cancelled
            try:
                self.chunks.put(chunk, timeout=_PUT_WAIT_S)
                return
            except queue.Full:
                waited += _PUT_WAIT_S


def regular_files(root: Path) -> list[str]:
    """Every regular file under ``root`` (links and special files left out), as sorted relative paths."""
    out: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        out.extend((Path(dirpath) / n).relative_to(root).as_posix() for n in filenames
                   if (Path(dirpath) / n).is_file() and not (Path(dirpath) / n).is_symlink())
    return sorted(out)


def _write(sink: _Sink, prefix: str, root: Path, edited: Mapping[str, str]) -> None:
    with tarfile.open(fileobj=sink, mode="w|gz", bufsize=CHUNK) as tar:  # type: ignore[call-overload]
        for rel in sorted({*regular_files(root), *edited}):
            info = tarfile.TarInfo(f"{prefix}/{rel}")
            info.mode = 0o644
            if rel in edited:
                data = edited[rel].encode()
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
                continue
            path = root / rel
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            except OSError:
                continue  # gone since the walk
            with os.fdopen(fd, "rb") as f:
                if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                    continue
                info.size = os.fstat(f.fileno()).st_size
                tar.addfile(info, f)
    sink.flush()


def stream(prefix: str, root: Path, edited: Mapping[str, str]) -> Iterator[bytes]:
    """The archive's bytes in chunks; raises :class:`Busy` (before anything is built) when every slot is
    taken. The slot is given back when the build ends, fails or its reader goes away."""
    if not _SLOTS.acquire(blocking=False):
        raise Busy(f"{MAX_BUILDS} archives are being built; try again in a moment")
    chunks: queue.Queue[bytes | None] = queue.Queue(maxsize=QUEUE_CHUNKS)
    stop, done = threading.Event(), threading.Event()
    lock = threading.Lock()
    build = {"released": False, "failed": False}

    def release() -> None:
        with lock:
            if not build["released"]:
                build["released"] = True
                _SLOTS.release()

    def produce() -> None:
        sink = _Sink(chunks, stop)
        try:
            _write(sink, prefix, root, edited)
            sink._put(None)
        except _Cancelled:
            build["failed"] = sink.stalled  # a reader that comes back gets a broken download, not a short one
        except Exception:
            logger.exception("building the archive of %s failed", prefix)
            build["failed"] = True
        finally:
            done.set()
            release()

    started: list[threading.Thread] = []

    def chunks_of() -> Iterator[bytes]:
        thread = threading.Thread(target=produce, name=f"archive-{prefix}", daemon=True)
        started.append(thread)
        thread.start()
        try:
            while True:
                try:
                    chunk = chunks.get(timeout=_PUT_WAIT_S)
                except queue.Empty:
                    if done.is_set() and chunks.empty():
                        break
                    continue
                if chunk is None:
                    break
                yield chunk
            if build["failed"]:  # end the response without its last chunk: the client sees a broken download
                raise RuntimeError(f"the archive of {prefix} could not be built or was not read in time "
                                   "(the server's log says why)")
        finally:
            stop.set()

    def abandon() -> None:  # the response ended (or was dropped) without reading to the end
        stop.set()
        if not started:
            release()

    gen = chunks_of()
    weakref.finalize(gen, abandon)
    return gen
