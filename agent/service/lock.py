"""One server per data dir: two would both claim the same queued sessions."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path


class DataDirBusy(RuntimeError):
    pass


def hold_data_dir(data_dir: Path) -> int:
    """An exclusive lock on ``data_dir/service.lock`` held until the returned descriptor is closed."""
    fd = os.open(data_dir / "service.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise DataDirBusy(f"another Ferry server uses {data_dir}; stop it or give this one another "
                          "--data-dir") from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd
