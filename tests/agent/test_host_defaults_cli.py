"""``ferry serve`` refuses workers the host's memory cannot back; ``ferry doctor`` shows the per-run
defaults that follow the host (``sandbox.hostmem``; the host given by ``FERRY_MEMINFO``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from sandbox import hostmem
from sandbox.hostmem import GiB

ROOT = Path(__file__).resolve().parents[2]


def meminfo(total_gib: float) -> str:
    kb = int(total_gib * 1024 * 1024)
    return f"MemTotal:       {kb} kB\nMemFree:   1 kB\nMemAvailable:   {kb} kB\n"


def _serve(tmp_path: Path, *args: str, total_gib: float) -> subprocess.CompletedProcess:
    fake = tmp_path / "meminfo"
    fake.write_text(meminfo(total_gib))
    env = {**os.environ, "FERRY_MEMINFO": str(fake), "FERRY_API_TOKENS": ""}
    return subprocess.run([sys.executable, "-m", "agent.cli", "serve", "--port", "0", "--data-dir",
                           str(tmp_path / "data"), *args], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env=env)


def test_serve_refuses_more_workers_than_the_host_can_back(tmp_path: Path):
    r = _serve(tmp_path, "--workers", "8", total_gib=8)
    assert r.returncode == 2, r.stderr
    assert "--workers 8" in r.stderr and "Lower --workers" in r.stderr and "Traceback" not in r.stderr


def test_doctor_shows_the_host_defaults(tmp_path: Path):
    fake = tmp_path / "meminfo"
    fake.write_text(meminfo(12))
    r = subprocess.run([sys.executable, "-m", "agent.cli", "doctor", "--json"], cwd=ROOT, capture_output=True,
                       text=True, timeout=300, env={**os.environ, "FERRY_MEMINFO": str(fake)})
    report = json.loads(r.stdout)
    host = report["host_defaults"]
    assert host["total_bytes"] == 12 * GiB and host["runs_in_flight"] == hostmem.runs_in_flight(1)
    assert report["disk"]["cap_bytes"] == host["disk_bytes"] < 4 * GiB
    assert report["isolation"]["seccomp"]


def test_the_pr_bots_workers_and_background_runs_are_counted(tmp_path: Path):
    """The budget counts every run the sessions can have at once: a worker's foreground and reference runs,
    and the PR bot's job workers too (second reader: both were left out). On 8 GiB, two parallel slots:
    2 workers = 4 runs fit, 2 workers + 2 bot workers = 8 runs do not."""
    fake = tmp_path / "meminfo"
    fake.write_text(meminfo(8))
    base = {**os.environ, "FERRY_MEMINFO": str(fake), "FERRY_PARALLEL_RUNS": "2", "FERRY_API_TOKENS": "a=" + "t" * 20}
    bot = {"FERRY_GITHUB_TOKEN": "x", "FERRY_GITHUB_WEBHOOK_SECRET": "s" * 24, "FERRY_GITHUB_WORKERS": "2"}
    args = [sys.executable, "-m", "agent.cli", "serve", "--port", "0", "--data-dir", str(tmp_path / "d"),
            "--workers", "2"]
    r = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=120, env={**base, **bot})
    assert r.returncode == 2, r.stderr
    assert "run up to 8 sandboxed runs at once" in r.stderr and "PR bot's 2 job worker(s)" in r.stderr
