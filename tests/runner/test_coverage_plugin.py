"""Issue 30: the pytest plugin the runner loads into a test run asked to measure coverage
(tools/runner/child/_ferry_cov.py): it uses the coverage.py of the run's own interpreter and writes its
figure, or why there is none, and never breaks the user's tests. A stand-in ``coverage`` package on the
path plays the user's (Ferry installs none)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tools.runner.env import CHILD_DIR

FAKE = '''import os


class Coverage:
    def __init__(self, data_file=None, source=None, omit=None, config_file=True):
        self.source = source

    def start(self):
        os.environ["_FAKE_STARTED"] = "1"

    def stop(self):
        pass

    def report(self, file=None, ignore_errors=False):
        return float(os.environ["FAKE_PERCENT"])
'''
ABSENT = 'raise ImportError("No module named coverage")\n'


def _run(tmp_path: Path, fake: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    (tmp_path / "site" / "coverage").mkdir(parents=True)
    (tmp_path / "site" / "coverage" / "__init__.py").write_text(fake)
    (tmp_path / "test_a.py").write_text("import os\n\n\ndef test_a():\n    assert os.environ.get('_FAKE_STARTED') "
                                        "or True\n")
    out = tmp_path / "coverage.json"
    env = {**os.environ, "PYTHONPATH": f"{CHILD_DIR}:{tmp_path / 'site'}", "FERRY_COVERAGE_OUT": str(out),
           "FERRY_WORKSPACE": str(tmp_path), "FAKE_PERCENT": "83.456"}
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "_ferry_cov",
                        "test_a.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    return r, out


def test_the_users_coverage_measures_and_the_figure_is_written(tmp_path: Path):
    r, out = _run(tmp_path, FAKE)
    assert r.returncode == 0, r.stdout[-2000:]
    assert json.loads(out.read_text()) == {"percent": 83.46}


def test_without_coverage_in_the_interpreter_the_tests_still_run_and_the_reason_is_written(tmp_path: Path):
    r, out = _run(tmp_path, ABSENT)
    assert r.returncode == 0 and "1 passed" in r.stdout, r.stdout[-2000:]
    assert json.loads(out.read_text()) == {"error": "coverage.py is not installed in the interpreter the tests "
                                                    "run with"}
