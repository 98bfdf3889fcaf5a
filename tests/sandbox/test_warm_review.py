"""Review of warm starts (``sandbox.warm``): what a warm run could see or do that the cold run of
the same command cannot, and where the two differed. Each test failed before its fix."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import tempfile
import textwrap
import threading
import time
import uuid
from pathlib import Path

import pytest

import sandbox.warm.server
from sandbox import WarmServer, WarmStart, python_spec, run_in_sandbox
from sandbox.env import scrubbed_env
from sandbox.execute import RUN_MARKER_ENV

from .conftest import PY, VENV_PATH, requires_bwrap, small_limits

pytestmark = requires_bwrap

RUN_VAR = "FERRY_WARM_REVIEW_VAR"  # a per-run variable (a dynamic key of the server)


@pytest.fixture(scope="module")
def server():
    env = scrubbed_env(dict(os.environ), {}, path=VENV_PATH)
    srv = WarmServer(env, ["json"], dynamic_keys=frozenset({RUN_MARKER_ENV, RUN_VAR}))
    assert srv.wait_ready(), srv.failure
    yield srv
    srv.close()


def _run(server, workspace, code: str, *, warm: bool = True, env: dict | None = None):
    (workspace.path / "prog.py").write_text(textwrap.dedent(code))
    command = "python prog.py"
    spec = python_spec(command, VENV_PATH, PY)
    assert spec is not None
    res = run_in_sandbox(["/bin/sh", "-c", command], workspace.path, limits=small_limits(), env=env,
                         path_env=VENV_PATH, warm=WarmStart(server, spec) if warm else None)
    assert res.warm is warm, res.warm_fallback
    return res


# Reads the process's own writable anonymous memory (heap and anonymous mappings): what a fork
# inherited from the server is all there, whatever Python objects still point to it or not.
SCAN = """
    import ctypes, re
    needle = re.compile(re.escape(b"{prefix}") + rb"[0-9a-f]{{32}}")
    found = set()
    for line in open("/proc/self/maps"):
        parts = line.split()
        name = parts[5] if len(parts) > 5 else ""
        if parts[1] != "rw-p" or name not in ("", "[heap]"):
            continue
        lo, hi = (int(x, 16) for x in parts[0].split("-"))
        if hi - lo > 256 << 20:
            continue
        for at in range(lo, hi, 1 << 20):
            found.update(m.group().decode() for m in needle.finditer(ctypes.string_at(at, min(1 << 20, hi - at))))
    print(sorted(found))
"""


def test_a_warm_run_finds_nothing_of_an_earlier_runs_request_in_its_memory(server, workspace):
    """Every run forks from the server's memory: a request it had parsed (another run's
    environment, workspace path) stayed in its freed heap and was readable by every later run."""
    prefix = "FERRY-REVIEW-SECRET-"
    secret = prefix + uuid.uuid4().hex
    first = _run(server, workspace, "print('first')\n", env={RUN_VAR: secret})
    assert first.status == "ok", first.stderr
    second = _run(server, workspace, SCAN.format(prefix=prefix), env={RUN_VAR: "another run"})
    assert second.status == "ok", second.stderr
    assert second.stdout == "[]\n"
    assert secret not in second.stdout


PROC_SELF = """
    import os
    env = open("/proc/self/environ", "rb").read()
    print("environ readable", b"PATH=" in env)
    print("auxv readable", len(open("/proc/self/auxv", "rb").read()) > 0)
    print("owner is me", os.stat("/proc/self/environ").st_uid == os.getuid())
"""


def test_proc_self_is_the_commands_own_as_in_a_cold_run(server, workspace):
    """The uid change left the warm command non-dumpable (an exec'ed command is dumpable again):
    its /proc/self files were root's, so reading /proc/self/environ failed with EACCES."""
    warm = _run(server, workspace, PROC_SELF)
    cold = _run(server, workspace, PROC_SELF, warm=False)
    assert cold.status == "ok", cold.stderr
    assert warm.status == "ok", warm.stderr
    assert warm.stdout == cold.stdout == "environ readable True\nauxv readable True\nowner is me True\n"


FINALIZE = """
    log = open("results.txt", "w")
    log.write("written, never closed\\n")

    class Report:
        def __del__(self):
            print("finalized")

    report = Report()
    print("main done")
"""


def test_main_globals_are_finalized_at_exit_as_in_a_cold_run(server, workspace):
    """Interpreter shutdown releases ``__main__``'s globals: a file left open is flushed and
    ``__del__`` runs. The warm command ended with ``os._exit`` after atexit, so the file stayed
    empty and the finalizer's output was missing."""
    cold = _run(server, workspace, FINALIZE, warm=False)
    cold_file = (workspace.path / "results.txt").read_text()
    (workspace.path / "results.txt").unlink()
    warm = _run(server, workspace, FINALIZE)
    assert warm.status == cold.status == "ok", (warm.stderr, cold.stderr)
    assert cold_file == "written, never closed\n"
    assert (workspace.path / "results.txt").read_text() == cold_file
    assert warm.stdout == cold.stdout == "main done\nfinalized\n"
    assert warm.stderr == cold.stderr == ""


def test_a_failed_flush_of_stdout_at_exit_fails_the_run_as_in_a_cold_run(server, workspace):
    """Python reports a stdout it cannot flush at shutdown and exits with 120; the warm command
    ignored the error and exited 0, so a run whose output was lost passed."""
    code = "import os, sys\nsys.stdout.write('never flushed')\nos.close(1)\n"
    warm = _run(server, workspace, code)
    cold = _run(server, workspace, code, warm=False)
    assert cold.exit_code == 120 and cold.status == "failed"
    assert warm.exit_code == cold.exit_code and warm.status == cold.status
    assert warm.stderr == cold.stderr
    assert cold.stderr.startswith("Exception ignored in: <_io.TextIOWrapper name='<stdout>'")


def test_a_sandbox_gone_before_the_fork_joins_it_never_runs_the_command_outside(server, workspace, monkeypatch):
    """The fork joins the namespaces of the sandbox's placeholder. When that process had ended
    in the meantime, /proc/PID/ns did not exist, no namespace was joined, and the command ran
    in the host's namespaces (host files, network, pids) as a warm run that reported success.
    Now it starts cold, in a sandbox of its own."""
    real = sandbox.warm.server.placeholder_pid

    def placeholder_then_gone(root: int, *args, **kwargs):
        pid, family = real(root, *args, **kwargs)
        os.kill(pid, 9)
        for _ in range(2000):  # a bound, not a speed check: bubblewrap reaps it at once
            if not Path(f"/proc/{pid}").exists():
                break
            time.sleep(0.005)
        return pid, family

    monkeypatch.setattr(sandbox.warm.server, "placeholder_pid", placeholder_then_gone)
    # In the host's /tmp, readable by anyone: a sandboxed command has a private /tmp.
    with tempfile.NamedTemporaryFile("w", dir="/tmp", prefix="ferry-review-host-", suffix=".txt") as secret:
        secret.write("HOST FILE")
        secret.flush()
        os.chmod(secret.name, 0o644)
        code = (f"import os, pathlib; p = pathlib.Path({secret.name!r}); "
                "print('host file', p.read_text() if p.exists() else 'invisible'); "
                "print('few pids', len([d for d in os.listdir('/proc') if d.isdigit()]) < 10)")
        command = f"python -c {shlex.quote(code)}"
        spec = python_spec(command, VENV_PATH, PY)
        assert spec is not None
        res = run_in_sandbox(["/bin/sh", "-c", command], workspace.path, limits=small_limits(),
                             path_env=VENV_PATH, warm=WarmStart(server, spec))
    assert "HOST FILE" not in res.stdout
    assert res.warm is False and res.warm_fallback, (res.stdout, res.stderr)
    assert "namespace" in res.warm_fallback or "is gone" in res.warm_fallback, res.warm_fallback
    assert res.status == "ok", res.stderr
    assert res.stdout == "host file invisible\nfew pids True\n"


def test_a_run_waiting_for_its_server_is_not_timed_out_by_the_wait(workspace, tmp_path):
    """A server still importing (here: 5 s): the run waits for it no longer than its own timeout,
    then starts cold with its whole timeout (it used to wait up to READY_TIMEOUT_S, the wait
    counted against the timeout, and a millisecond program was reported timed out)."""
    mods = tmp_path / "slowmods"
    mods.mkdir()
    (mods / "ferry_review_slow.py").write_text("import time\ntime.sleep(5)\n")
    extra = {"PYTHONPATH": str(mods)}
    srv = WarmServer(scrubbed_env(dict(os.environ), extra, path=VENV_PATH), ["ferry_review_slow"],
                     dynamic_keys=frozenset({RUN_MARKER_ENV}))
    try:
        (workspace.path / "hello.py").write_text("print('hello')\n")
        spec = python_spec("python hello.py", VENV_PATH, PY)
        res = run_in_sandbox(["/bin/sh", "-c", "python hello.py"], workspace.path,
                             limits=small_limits(timeout_s=1.5), env=extra, path_env=VENV_PATH,
                             warm=WarmStart(srv, spec))
        assert srv.failure is None and srv.wait_ready()  # only slow: still there for later runs
    finally:
        srv.close()
    assert res.status == "ok" and res.stdout == "hello\n", (res.status, res.warm, res.warm_fallback)
    assert not res.warm and "not ready within" in (res.warm_fallback or "")


def test_an_uncaught_keyboard_interrupt_shuts_down_before_dying_by_sigint(server, workspace):
    """Python prints the traceback, runs the shutdown (atexit handlers, open files flushed) and
    then kills itself with SIGINT; the warm command killed itself right after the traceback."""
    code = """
        import atexit
        atexit.register(print, "atexit ran")
        log = open("partial.txt", "w")
        log.write("kept")
        raise KeyboardInterrupt
    """
    cold = _run(server, workspace, code, warm=False)
    cold_file = (workspace.path / "partial.txt").read_text()
    (workspace.path / "partial.txt").unlink()
    warm = _run(server, workspace, code)
    assert cold.status == "killed" and cold.signal == 2 and cold_file == "kept"
    assert (warm.status, warm.signal, warm.exit_code) == (cold.status, cold.signal, cold.exit_code)
    assert warm.stdout == cold.stdout == "atexit ran\n"
    assert warm.stderr == cold.stderr and warm.stderr.endswith("KeyboardInterrupt\n")
    assert (workspace.path / "partial.txt").read_text() == cold_file


def test_python_u_original_streams_are_the_unbuffered_ones(server, workspace):
    """Under ``python -u`` ``sys.__stdout__`` is ``sys.stdout``. The warm command replaced only
    ``sys.stdout``/``sys.stderr``: what a program wrote through ``sys.__stdout__`` (libraries
    writing to the original stream) sat in the server's buffered stream and was lost at exit."""
    (workspace.path / "orig.py").write_text(
        "import sys\nsys.__stdout__.write('through __stdout__\\n')\nsys.__stderr__.write('through __stderr__\\n')\n"
        "print('print')\nprint(sys.stdout is sys.__stdout__, sys.stderr is sys.__stderr__)\n")
    spec = python_spec("python -u orig.py", VENV_PATH, PY)
    results = [run_in_sandbox(["/bin/sh", "-c", "python -u orig.py"], workspace.path, limits=small_limits(),
                              path_env=VENV_PATH, warm=WarmStart(server, spec) if warm else None)
               for warm in (True, False)]
    warm, cold = results
    assert warm.warm and not cold.warm
    assert cold.stdout == "through __stdout__\nprint\nTrue True\n"
    assert warm.stdout == cold.stdout
    assert warm.stderr == cold.stderr == "through __stderr__\n"


def test_the_after_fork_hook_is_never_imported_from_the_workspace(workspace):
    """The hook was imported after the chdir into the workspace with ``''`` first on sys.path,
    and before the command had closed its channel to Ferry: a workspace module named like the
    hook ran with the run's socket open and could tell Ferry any pid as the command's, which
    Ferry then signals (as root) at the timeout. Here the forged pid is a host process."""
    env = scrubbed_env(dict(os.environ), {}, path=VENV_PATH)
    srv = WarmServer(env, ["json"], after_fork="ferry_review_hook:setup", dynamic_keys=frozenset({RUN_MARKER_ENV}))
    victim = subprocess.Popen(["sleep", "300"])
    try:
        assert srv.wait_ready(), srv.failure
        forged = json.dumps({"started": victim.pid, "running": True})
        (workspace.path / "ferry_review_hook.py").write_text(textwrap.dedent(f"""
            import os, socket
            for fd in range(3, 64):
                try:
                    s = socket.socket(fileno=os.dup(fd))
                    s.send({forged!r}.encode())
                except OSError:
                    pass
            def setup():
                pass
        """))
        (workspace.path / "slow.py").write_text("import time\ntime.sleep(30)\n")
        spec = python_spec("python slow.py", VENV_PATH, PY)
        res = run_in_sandbox(["/bin/sh", "-c", "python slow.py"], workspace.path,
                             limits=small_limits(timeout_s=1.5), path_env=VENV_PATH, warm=WarmStart(srv, spec))
        assert res.status == "timeout"
        assert victim.poll() is None, "Ferry signalled the host process the workspace named"
        assert res.warm is False and "ferry_review_hook" in (res.warm_fallback or "")
    finally:
        victim.kill()
        victim.wait()
        srv.close()


def test_a_server_dying_mid_run_ends_the_run_as_killed_with_no_stray_counted(workspace, tmp_path):
    """The command dies with its server; the sandbox's placeholder (ended by the supervisor) is no
    stray, and the processes ended are counted once each, not once per signal sent."""
    srv = WarmServer(scrubbed_env(dict(os.environ), {}, path=VENV_PATH), [], dynamic_keys=frozenset({RUN_MARKER_ENV}))
    try:
        (workspace.path / "wait.py").write_text("import time\nprint('up', flush=True)\ntime.sleep(60)\n")
        spec = python_spec("python wait.py", VENV_PATH, PY)
        threading.Timer(1.0, srv.close).start()
        res = run_in_sandbox(["/bin/sh", "-c", "python wait.py"], workspace.path, limits=small_limits(timeout_s=30),
                             path_env=VENV_PATH, warm=WarmStart(srv, spec))
    finally:
        srv.close()
    assert res.warm and res.status == "killed" and not res.timed_out, (res.status, res.stderr)
    assert res.stdout == "up\n" and res.strays_killed == 0
