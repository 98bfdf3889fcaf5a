"""Two `ferry resume ID` at once: one proceeds, the other is refused at once naming the holder; after
kill -9 of the holder a resume works and ends with the patch of an uninterrupted run.

Real CLI subprocesses, the real runner, codemods and tpx backend, SQLite checkpoints.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent.migration.facade import load

ROOT = Path(__file__).resolve().parents[2]

_progs_spec = importlib.util.spec_from_file_location("agent_test_programs", Path(__file__).with_name("programs.py"))
programs = importlib.util.module_from_spec(_progs_spec)
_progs_spec.loader.exec_module(programs)


def _repo(path: Path) -> Path:
    path.mkdir()
    (path / "prog.py").write_text(programs.POLICY_PROGRAM)
    return path


def _ferry(*args: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "FERRY_DATABASE_URL"}
    return subprocess.Popen([sys.executable, "-m", "agent.cli", *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True, env=env)


@pytest.mark.slow
def test_two_resumes_one_refused_then_kill_9_and_resume_gives_the_same_patch(tmp_path, monkeypatch):
    monkeypatch.delenv("FERRY_DATABASE_URL", raising=False)
    # The reference: the same program migrated without interruption.
    plain = _ferry("migrate", str(_repo(tmp_path / "plain")), "--run", "python prog.py", "--json",
                   "--state-dir", str(tmp_path / "plain-state"), "--out", str(tmp_path / "plain-out"))
    out, err = plain.communicate(timeout=600)
    assert plain.returncode == 0 and json.loads(out)["status"] == "migrated", err[-3000:]
    want = (tmp_path / "plain-out" / "ferry.patch").read_text()

    repo = _repo(tmp_path / "repo")
    sdir = tmp_path / "state"
    mid = "owner-test"
    code = programs.migrate_then_kill_9(ROOT, repo, sdir, mid, tmp_path / "out", lambda: load(mid, sdir))
    assert code == -signal.SIGKILL

    first, second = (_ferry("resume", mid, "--state-dir", str(sdir), "--json") for _ in range(2))
    procs = {first.pid: first, second.pid: second}
    try:
        refused = None
        deadline = time.monotonic() + 120
        while refused is None and time.monotonic() < deadline:
            refused = next((p for p in procs.values() if p.poll() is not None), None)
            time.sleep(0.05)
        assert refused is not None, "neither resume was refused"
        holder = next(p for p in procs.values() if p is not refused)
        assert holder.poll() is None, "the refusal must come while the holder still works, not after it"
        r_out, r_err = refused.communicate(timeout=30)
        assert refused.returncode == 2, r_out[-2000:] + r_err[-2000:]
        assert f"pid {holder.pid} on host {socket.gethostname()}" in r_err and "since" in r_err, r_err
        assert "Traceback" not in r_err

        # kill -9 the one that proceeds, mid-way (its sandboxed runs die with its process group)
        time.sleep(1.0)
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait(timeout=30)
    finally:
        for p in procs.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=30)

    last = _ferry("resume", mid, "--state-dir", str(sdir), "--json")
    out, err = last.communicate(timeout=600)
    assert last.returncode == 0, out[-3000:] + err[-3000:]
    assert json.loads(out)["status"] == "migrated"
    assert (tmp_path / "out" / "ferry.patch").read_text() == want
