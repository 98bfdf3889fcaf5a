"""What a killed server leaves in its data dir, removed when the next one starts (it holds the data dir's
lock, so nothing else is writing there): upload temp dirs, and session copies whose create never
committed its row."""

from __future__ import annotations

import logging
import re
import shutil
from pathlib import Path

from agent.migration.paths import sessions_root
from agent.service.store import SessionStore

logger = logging.getLogger(__name__)

UPLOAD_PREFIX = "ferry-upload-"
_SESSION_ID = re.compile(r"s[0-9A-Za-z_-]{1,80}")


def sweep(data_dir: Path, store: SessionStore) -> int:
    """Remove the leftovers; how many were removed."""
    removed = 0
    for tmp in data_dir.glob(f"{UPLOAD_PREFIX}*"):
        if tmp.is_dir() and not tmp.is_symlink():
            shutil.rmtree(tmp, ignore_errors=True)
            removed += 1
    sessions = sessions_root(data_dir)
    for sdir in sessions.iterdir() if sessions.is_dir() else ():
        ours = sdir.is_dir() and not sdir.is_symlink() and _SESSION_ID.fullmatch(sdir.name) is not None
        if ours and store.get(sdir.name) is None:
            shutil.rmtree(sdir, ignore_errors=True)
            removed += 1
    if removed:
        logger.info("removed %d leftovers of an interrupted server (upload temp dirs, uncommitted sessions)", removed)
    return removed
