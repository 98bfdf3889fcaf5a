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
    assert r.returncode == 2 and "holds no */ferry-eval.toml cases" in r.stderr
    r = _ferry("resume", "--state-dir", str(tmp_path))
    assert r.returncode == 2 and "give the migration ID" in r.stderr
    r = _ferry("resume", "--list", "--state-dir", str(tmp_path), "--json")
    assert r.returncode == 0 and r.stdout.strip() == "[]"


def test_run_and_check_settings_must_be_ferry_or_tpx_key_values(tmp_path, capsys):
    from agent.cli import main

    assert main(["run", "--env", "TPX_X", str(tmp_path), "--", "python", "x.py"]) == 2
    assert "--env 'TPX_X': use KEY=VALUE, e.g. --env TPX_MATMUL_PRECISION=highest" in capsys.readouterr().err
    assert main(["run", "--env", "PATH=/x", str(tmp_path), "--", "python", "x.py"]) == 2
    # any other key is the user's own variable (--env, docs/runner.md), but never one the runner sets
    assert "--env PATH: PATH is set by the runner for every run" in capsys.readouterr().err
    assert main(["check", str(tmp_path), "--run", "python x.py", "--target-set", "=1"]) == 2
    assert "--target-set '=1': use KEY=VALUE" in capsys.readouterr().err


def test_a_bad_disk_limit_is_a_usage_error(tmp_path, capsys, monkeypatch):
    from agent.cli import main

    (tmp_path / "repo").mkdir()
    repo = str(tmp_path / "repo")
    assert main(["run", "--disk-limit", "lots", repo, "--", "python", "x.py"]) == 2
    assert ("--disk-limit 'lots' is not a size: give bytes or a number with K, M, G or T (e.g. 512M, 4G, 4GiB)"
            in capsys.readouterr().err)
    assert main(["check", repo, "--run", "python x.py", "--disk-limit", "12"]) == 2
    assert "--disk-limit '12' is too small: a run needs at least 1M" in capsys.readouterr().err
    assert main(["migrate", repo, "--run", "python x.py", "--disk-limit", "4Q", "--state-dir",
                 str(tmp_path / "s")]) == 2
    assert "--disk-limit '4Q' is not a size" in capsys.readouterr().err
    monkeypatch.setenv("FERRY_DISK_LIMIT", "huge")
    assert main(["run", repo, "--", "python", "x.py"]) == 2
    assert "FERRY_DISK_LIMIT='huge': 'huge' is not a size" in capsys.readouterr().err


def test_run_with_a_disk_limit_stops_at_it(tmp_path, capsys, monkeypatch):
    from agent.cli import main
    from sandbox.runspace import mount_support

    (tmp_path / "repo").mkdir()
    monkeypatch.setenv("FERRY_DISK_LIMIT", "1G")  # the flag wins
    fill = "with open('big', 'wb') as f:\n    [f.write(b'x' * (1 << 20)) for _ in range(100)]"
    code = main(["run", str(tmp_path / "repo"), "--device", "cpu", "--disk-limit", "64M", "--", "python", "-c", fill])
    out = capsys.readouterr().out
    assert code == 1
    if mount_support()[0]:
        assert "disk cap: tmpfs 64 MiB in all (workspace, /tmp, /dev/shm, run artifacts)" in out
        assert "signature: disk_quota" in out
        assert ("the run wrote more than its 64 MiB disk cap (workspace, /tmp, /dev/shm); "
                "raise it with --disk-limit or FERRY_DISK_LIMIT") in out
    else:  # per file only: 100 MiB fit (the result says why the cap is weaker)
        assert "no total cap" in out
    assert "resource control: " in out


def test_doctor_reports_the_disk_cap_and_the_resource_control(tmp_path):
    import json

    r = _ferry("doctor", "--json", env={"FERRY_DISK_LIMIT": "512M"})
    report = json.loads(r.stdout)
    assert report["disk"]["cap_bytes"] == 512 * 1024**2 and report["disk"]["error"] is None
    assert report["disk"]["mode"] in ("tmpfs", "per_area") and "512 MiB" in report["disk"]["describe"]
    assert report["resource_control"]["level"] in ("cgroup2", "cgroup1", "rlimits")
    r = _ferry("doctor")
    assert "disk cap per run: " in r.stdout and f"resource control: {report['resource_control']['level']}" in r.stdout
    r = _ferry("doctor", env={"FERRY_DISK_LIMIT": "x"})
    assert r.returncode == 1 and "FERRY_DISK_LIMIT='x'" in r.stdout


def test_run_artifacts_must_not_be_a_users_directory_or_inside_the_repo(tmp_path):
    """`ferry run --artifacts DIR` removed DIR/child and DIR/collected and overwrote DIR/result.json
    whatever they were: a directory of the user's (their repository, `.`) lost them."""
    repo = tmp_path / "repo"
    (repo / "collected").mkdir(parents=True)
    (repo / "collected" / "data.csv").write_text("the user's data\n")
    (repo / "child").mkdir()
    (repo / "child" / "notes.txt").write_text("keep me\n")
    (repo / "prog.py").write_text("print('hi')\n")
    r = _ferry("run", str(repo), "--device", "cpu", "--artifacts", str(repo), "--", "python", "prog.py")
    assert r.returncode == 2 and "--artifacts" in r.stderr and "inside the repository" in r.stderr, r.stderr
    mine = tmp_path / "mine"
    (mine / "collected").mkdir(parents=True)
    (mine / "collected" / "data.csv").write_text("the user's data\n")
    (mine / "result.json").write_text("{}\n")
    r = _ferry("run", str(repo), "--device", "cpu", "--artifacts", str(mine), "--", "python", "prog.py")
    assert r.returncode == 2 and "already holds collected, result.json" in r.stderr, r.stderr
    assert (repo / "collected" / "data.csv").read_text() == "the user's data\n"
    assert (repo / "child" / "notes.txt").read_text() == "keep me\n"
    assert (mine / "collected" / "data.csv").read_text() == "the user's data\n"
    assert (mine / "result.json").read_text() == "{}\n"
    # a directory Ferry's runs use is reused, run after run
    art = tmp_path / "art"
    for _ in range(2):
        r = _ferry("run", str(repo), "--device", "cpu", "--artifacts", str(art), "--", "python", "prog.py")
        assert r.returncode == 0 and "status: ok" in r.stdout, r.stderr[-2000:]
    assert (art / "stdout.txt").read_text() == "hi\n"
