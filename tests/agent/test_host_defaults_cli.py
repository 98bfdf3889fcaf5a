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
    assert host["total_bytes"] == 12 * GiB and host["runs_in_flight"] == hostmem.DEFAULT_RUNS_IN_FLIGHT
    assert report["disk"]["cap_bytes"] == host["disk_bytes"] < 4 * GiB
    assert report["isolation"]["seccomp"]
