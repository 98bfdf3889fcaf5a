"""Issue 29: ``python -m agent.cli`` ends without the interpreter's teardown (about a second with torch
loaded), but only after its exit handlers ran and its output was flushed; a thread that is not a daemon
still gets waited for."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROGRAM = """
import atexit, sys, threading, time
from pathlib import Path
from agent.cli import exit_now

mark = Path(sys.argv[1])
atexit.register(lambda: mark.write_text("handlers ran"))
if sys.argv[2] == "thread":
    threading.Thread(target=lambda: (time.sleep(0.5), print("thread finished", flush=True))).start()
print("no newline, still buffered", end="")
print("on stderr", end="", file=sys.stderr)
exit_now(3)
"""


def _run(tmp_path: Path, mode: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    mark = tmp_path / f"mark-{mode}"
    r = subprocess.run([sys.executable, "-c", PROGRAM, str(mark), mode], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    return r, mark


def test_exit_now_runs_the_exit_handlers_and_flushes_the_output(tmp_path: Path):
    r, mark = _run(tmp_path, "plain")
    assert r.returncode == 3
    assert r.stdout == "no newline, still buffered" and r.stderr == "on stderr"
    assert mark.read_text() == "handlers ran"


def test_exit_now_waits_for_a_thread_that_is_not_a_daemon(tmp_path: Path):
    r, mark = _run(tmp_path, "thread")
    assert r.returncode == 3
    assert "thread finished" in r.stdout and mark.read_text() == "handlers ran"



CONSOLE = """
import sys
from importlib.metadata import entry_points

class Teardown:
    def __del__(self):
        sys.stderr.write("interpreter teardown")

kept = Teardown()  # freed only by the interpreter's module-by-module teardown
(script,) = [ep for ep in entry_points(group="console_scripts") if ep.name == "ferry"]
sys.argv = ["ferry", "--help"]
sys.exit(script.load()())  # what the installed `ferry` wrapper does
"""


def test_the_ferry_console_script_ends_as_python_m_agent_cli_does():
    r = subprocess.run([sys.executable, "-c", CONSOLE], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "usage: ferry" in r.stdout
    assert "interpreter teardown" not in r.stderr
