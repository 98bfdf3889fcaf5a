"""What a killed server leaves in its data dir, removed when the next one starts (it holds the data dir's
lock, so nothing else is writing there): upload temp dirs, and session copies whose create never
committed its row. On a data dir shared by the servers of one Postgres database, only those older than
``SHARED_AGE_S`` (another server may be creating one right now)."""

from __future__ import annotations

import logging
import re
import shutil
import time
from pathlib import Path

from agent.migration.paths import sessions_root
from agent.service.store import SessionStore

logger = logging.getLogger(__name__)

UPLOAD_PREFIX = "ferry-upload-"
SHARED_AGE_S = 24 * 3600.0  # an upload or a create of another server takes far less
_SESSION_ID = re.compile(r"s[0-9A-Za-z_-]{1,80}")


def sweep(data_dir: Path, store: SessionStore, *, shared: bool = False) -> int:
    """Remove the leftovers; how many were removed. ``shared``: other servers use this data dir right now
    (Postgres), so only what is older than ``SHARED_AGE_S`` is theirs no more."""
    removed = 0
    cutoff = time.time() - SHARED_AGE_S if shared else None

    def old(path: Path) -> bool:
        try:
            return cutoff is None or path.stat().st_mtime < cutoff
        except OSError:
            return False

    for tmp in data_dir.glob(f"{UPLOAD_PREFIX}*"):
        if tmp.is_dir() and not tmp.is_symlink() and old(tmp):
            shutil.rmtree(tmp, ignore_errors=True)
            removed += 1
    sessions = sessions_root(data_dir)
    for sdir in sessions.iterdir() if sessions.is_dir() else ():
        ours = sdir.is_dir() and not sdir.is_symlink() and _SESSION_ID.fullmatch(sdir.name) is not None
        if ours and old(sdir) and store.get(sdir.name) is None:
            shutil.rmtree(sdir, ignore_errors=True)
            removed += 1
    if removed:
        logger.info("removed %d leftovers of an interrupted server (upload temp dirs, uncommitted sessions)", removed)
    return removed
