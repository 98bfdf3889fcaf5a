"""A program that prints ``torch.cuda.max_memory_reserved()`` unguarded (0 without a GPU) still runs on the
CPU once migrated (issue 33, item 6): the CPU check used to fail it ("Cannot access accelerator device when
none is available": ``partial``); the rewrite now answers 0 where no accelerator is, and the migration ends
``migrated``. Real ``ferry migrate``: the runner, sandbox, probe, codemods and tpx backend."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = Path(__file__).with_name("fixtures") / "memory_report"


@pytest.mark.slow
def test_memory_query_keeps_its_cpu_answer_and_the_migration_passes_the_cpu_check(tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(FIXTURE, repo, ignore=shutil.ignore_patterns("__pycache__"))
    env = {k: v for k, v in os.environ.items() if k != "FERRY_DATABASE_URL"}
    res = subprocess.run(
        [sys.executable, "-m", "agent.cli", "migrate", str(repo), "--run", "python train.py", "--json",
         "--state-dir", str(tmp_path / "state"), "--out", str(tmp_path / "out")],
        cwd=ROOT, capture_output=True, text=True, timeout=900, env=env)
    assert res.returncode in (0, 1), res.stdout[-3000:] + res.stderr[-3000:]
    result = json.loads(res.stdout)
    assert result["status"] == "migrated", result["summary"]
    assert result["cpu_check"]["verdict"] == "pass", result["cpu_check"]
    patch = (tmp_path / "out" / "ferry.patch").read_text()
    assert "+    print(\"max memory reserved\", (torch.accelerator.max_memory_reserved() if " \
           "torch.accelerator.is_available() else 0) >= 0)" in patch
