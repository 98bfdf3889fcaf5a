"""The migration process compares probe dumps on one intra-op thread (agent.migration.adapters.compare): its
runs take the cores meanwhile, and two torch threads on two busy cores wait on each other at every op."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import sys
from pathlib import Path
import torch
sys.path.insert(0, {tests!r})
from conftest import train_probed
from agent.migration import adapters
torch.set_num_threads(2)
out = Path({out!r})
ref, tgt = train_probed(out / "ref"), train_probed(out / "tgt")
before = torch.get_num_threads()
report = adapters.compare(ref, tgt)
print("threads", before, torch.get_num_threads(), "passed", report.passed, "compared", report.compared)
"""


def test_the_comparison_runs_on_one_host_thread(tmp_path: Path) -> None:
    code = SCRIPT.format(tests=str(ROOT / "tests" / "parity"), out=str(tmp_path))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("threads"))
    _, before, after, _, passed, _, compared = line.split()[:7]
    assert (before, after, passed) == ("2", "1", "True") and compared not in ("0", "False")
