"""Bad usage of migrate / resume / eval / run: exit 2 with a message that says what to do."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _ferry(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agent.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, **(env or {})})


def test_migrate_usage_errors(tmp_path):
    r = _ferry("migrate", str(tmp_path / "missing"), "--run", "python x.py")
    assert r.returncode == 2 and "is not a directory" in r.stderr
    r = _ferry("migrate", str(tmp_path), "--run", "  ")
    assert r.returncode == 2 and "--run is empty" in r.stderr
    r = _ferry("migrate", str(tmp_path), "--run", "python x.py", "--llm", "--offline")
    assert r.returncode == 2 and "contradict" in r.stderr
    r = _ferry("migrate", str(tmp_path), "--run", "python x.py", "--out", str(tmp_path))
    assert r.returncode == 2 and "--out must not be the repository" in r.stderr


def test_postgres_without_the_extra_is_a_clear_error(tmp_path):
    (tmp_path / "repo").mkdir()
    r = _ferry("migrate", str(tmp_path / "repo"), "--run", "python x.py", "--state-dir", str(tmp_path / "s"),
               env={"FERRY_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/ferry"})
    # without the extra it says to install it; with it (the dev extra), that nothing listens there.
    # Each path on its own, with a real server: tests/agent/test_postgres_checkpoints.py.
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "postgres' extra" in r.stderr or "cannot connect to the Postgres database" in r.stderr


def test_eval_and_resume_usage_errors(tmp_path):
    r = _ferry("eval", str(tmp_path))
    assert r.returncode == 2 and "holds no */eval.json" in r.stderr
    r = _ferry("resume", "--state-dir", str(tmp_path))
    assert r.returncode == 2 and "give the migration ID" in r.stderr
    r = _ferry("resume", "--list", "--state-dir", str(tmp_path), "--json")
    assert r.returncode == 0 and r.stdout.strip() == "[]"


def test_run_and_check_settings_must_be_ferry_or_tpx_key_values(tmp_path, capsys):
    from agent.cli import main

    assert main(["run", "--env", "TPX_X", str(tmp_path), "--", "python", "x.py"]) == 2
    assert "--env 'TPX_X': use KEY=VALUE, e.g. --env TPX_MATMUL_PRECISION=highest" in capsys.readouterr().err
    assert main(["run", "--env", "PATH=/x", str(tmp_path), "--", "python", "x.py"]) == 2
    assert "--env PATH: only FERRY_* and TPX_* settings" in capsys.readouterr().err
    assert main(["check", str(tmp_path), "--run", "python x.py", "--target-set", "=1"]) == 2
    assert "--target-set '=1': use KEY=VALUE" in capsys.readouterr().err
