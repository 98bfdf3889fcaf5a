"""Ferry's exit with a run still waiting for its warm interpreter: the run is cancelled before the
interpreter closes, so it never starts (cold or warm)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sandbox import detect

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent("""
    import sys
    from pathlib import Path
    from agent.migration import adapters
    from agent.migration.runs import RunScheduler

    repo, adir = Path(sys.argv[1]), Path(sys.argv[2])
    runs = RunScheduler()
    assert runs.prewarm_runs(0)
    # torch is still being imported by the warm interpreter: the run waits for it ...
    runs.start("exit:run", lambda cancel: adapters.run(
        repo, "python mark.py", device="tpx", redirect_cuda=None, probe=False, profile=False,
        timeout_s=120, seed=0, artifacts_dir=adir, cancel=cancel))
    # ... when Ferry exits
""")


@pytest.mark.skipif(detect().level != "bwrap", reason="warm starts need bubblewrap")
def test_exit_cancels_a_run_waiting_for_its_warm_interpreter(tmp_path: Path):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "mark.py").write_text("print('ran')\n")
    adir = tmp_path / "art"
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(repo), str(adir)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "FERRY_WARM_RUNS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((adir / "result.json").read_text())
    assert result["status"] == "cancelled" and not result["warm_start"]
    # cancelled while waiting, not started cold because its interpreter had been closed first
    assert "cancelled while waiting" in (result["warm_fallback"] or ""), result["warm_fallback"]
    assert "ran" not in (adir / "stdout.txt").read_text()
