"""The data dir shared by the servers of one Postgres database: each server holds a lock file of its own
(a second server with the same host id, or a SQLite server beside another, is refused), a starting server
sweeps only the left-overs old enough to be no other server's, and --database takes only a Postgres URL."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent.service.leftovers import SHARED_AGE_S, UPLOAD_PREFIX, sweep
from agent.service.lock import DataDirBusy, hold_data_dir
from agent.service.store import SessionStore

ROOT = Path(__file__).resolve().parents[2]


def test_servers_of_one_database_hold_their_own_lock_files(tmp_path: Path) -> None:
    a = hold_data_dir(tmp_path, "host-a:1:x")
    b = hold_data_dir(tmp_path, "host-b:2:y")  # a second server on the shared data dir
    try:
        with pytest.raises(DataDirBusy):
            hold_data_dir(tmp_path, "host-a:1:x")
        single = hold_data_dir(tmp_path)
        with pytest.raises(DataDirBusy):  # SQLite: one server per data dir, as before
            hold_data_dir(tmp_path)
        os.close(single)
    finally:
        os.close(a)
        os.close(b)


def test_a_shared_sweep_removes_only_what_is_older_than_any_live_create(tmp_path: Path) -> None:
    store = SessionStore(tmp_path / "service.db")
    try:
        fresh_upload, old_upload = tmp_path / f"{UPLOAD_PREFIX}new", tmp_path / f"{UPLOAD_PREFIX}old"
        fresh_session, old_session = tmp_path / "sessions" / "sfresh", tmp_path / "sessions" / "sold"
        for d in (fresh_upload, old_upload, fresh_session, old_session):
            d.mkdir(parents=True)
        past = time.time() - SHARED_AGE_S - 60
        for d in (old_upload, old_session):
            os.utime(d, (past, past))
        assert sweep(tmp_path, store, shared=True) == 2
        assert fresh_upload.exists() and fresh_session.exists()  # another server's create in progress
        assert not old_upload.exists() and not old_session.exists()
        assert sweep(tmp_path, store) == 2  # one server: everything without a row is a left-over
        assert not fresh_upload.exists() and not fresh_session.exists()
    finally:
        store.close()


def test_database_takes_only_a_postgres_url(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FERRY_")}
    res = subprocess.run([sys.executable, "-m", "agent.cli", "serve", "--port", "0", "--data-dir",
                          str(tmp_path / "d"), "--database", "sqlite:///tmp/x.db"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "--database must be a postgresql:// URL" in res.stderr, res.stderr
