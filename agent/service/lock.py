"""One server per data dir: two would both claim the same queued sessions."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path


class DataDirBusy(RuntimeError):
    pass


def hold_data_dir(data_dir: Path, host: str | None = None) -> int:
    """An exclusive lock on ``data_dir/service.lock`` held until the returned descriptor is closed.

    ``host`` (the servers of one Postgres database share the data dir): ``data_dir/hosts/<host>.lock``
    instead, a file of this server's own that says which process it is."""
    path = data_dir / "service.lock"
    if host is not None:
        (data_dir / "hosts").mkdir(mode=0o700, exist_ok=True)
        path = data_dir / "hosts" / f"{_file_name(host)}.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise DataDirBusy(f"another Ferry server uses {data_dir}; stop it or give this one another "
                          "--data-dir") from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def _file_name(host: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in host)[:120]
