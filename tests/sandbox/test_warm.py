"""Warm starts (``sandbox.warm``): which commands qualify, and that a run forked from a warm
server behaves like the cold run of the same command, in the same sandbox, under the same limits."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

import pytest

import sandbox.execute
from sandbox import WarmServer, WarmStart, create_workspace, detect, python_spec, run_in_sandbox
from sandbox.cgroups import detect_control
from sandbox.env import scrubbed_env
from sandbox.execute import RUN_MARKER_ENV
from sandbox.isolation import ferry_root
from sandbox.procs import is_alive
from sandbox.runspace import open_run_space

from .conftest import PY, VENV_PATH, mount_reason, requires_bwrap, small_limits

pytestmark = requires_bwrap

RUN_VAR = "FERRY_WARM_TEST_VAR"  # a per-run variable the tests pass through ``env=``


def _server_env() -> dict[str, str]:
    return scrubbed_env(dict(os.environ), {}, path=VENV_PATH)


@pytest.fixture(scope="module")
def server():
    srv = WarmServer(_server_env(), ["json"], dynamic_keys=frozenset({RUN_MARKER_ENV, RUN_VAR}))
    assert srv.wait_ready(), srv.failure
    yield srv
    srv.close()


def _run(server, workspace, command: str, *, warm: bool = True, env: dict | None = None, **kw):
    """Run ``command`` (a plain python invocation) warm or cold; returns the SandboxResult."""
    spec = python_spec(command, VENV_PATH, PY)
    start = WarmStart(server, spec) if warm and spec is not None else None
    limits = kw.pop("limits", None) or small_limits()
    argv = ["/bin/sh", "-c", command]
    return run_in_sandbox(argv, workspace.path, limits=limits, env=env, path_env=VENV_PATH, warm=start, **kw)


def _write(workspace, name: str, code: str) -> None:
    (workspace.path / name).write_text(textwrap.dedent(code))


def _gone(pid: int, within_s: float = 15.0) -> bool:
    """True once ``pid`` no longer runs, polling up to ``within_s`` (a bound, not a speed test)."""
    deadline = time.monotonic() + within_s
    while is_alive(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


# -- 1. which commands qualify ----------------------------------------------------------------
@pytest.mark.parametrize("command, expected", [
    ("python prog.py a b", ("script", "prog.py", ("a", "b"), False)),
    ("python -u prog.py", ("script", "prog.py", (), True)),
    ("python -B prog.py x", ("script", "prog.py", ("x",), False)),
    ("python -B -u prog.py", ("script", "prog.py", (), True)),
    ("python -m pytest -q", ("module", "pytest", ("-q",), False)),
    ("python -c 'print(1)'", ("code", "print(1)", (), False)),
    ("python -c 'print(1)' a", ("code", "print(1)", ("a",), False)),
    ("python -c 'print(sys.argv, \"$HOME\")' a", ("code", 'print(sys.argv, "$HOME")', ("a",), False)),
    ('python -c "print(2)"', ("code", "print(2)", (), False)),
    (f"{PY} prog.py", ("script", "prog.py", (), False)),
])
def test_python_spec_accepts_plain_invocations(command, expected):
    spec = python_spec(command, VENV_PATH, PY)
    assert spec is not None, command
    assert (spec.kind, spec.target, spec.args, spec.unbuffered) == expected


def test_python_spec_accepts_console_script_of_the_venv():
    spec = python_spec("pytest -q tests", VENV_PATH, PY)
    assert spec is not None
    assert spec.kind == "script" and spec.args == ("-q", "tests")
    assert os.path.realpath(spec.target) == os.path.realpath(Path(sys.prefix) / "bin" / "pytest")


@pytest.mark.parametrize("command", [
    "python a.py | cat",
    "X=1 python a.py",
    "python a.py > out",
    "python a.py; python b.py",
    "python a.py && echo ok",
    "python -O a.py",
    "python -X dev a.py",
    "/bin/echo hi",
    "sh -c 'python a.py'",
    "python",
    "python -u",
    "python -m",
    "python $HOME/a.py",
    'python -c "print($HOME)"',
    'python -c "print(`id`)"',
    "python -c 'print(1)' | cat",
    "python a*.py",
    "python 'unterminated",
    "",
    "no_such_program_xyz a.py",
])
def test_python_spec_refuses_everything_else(command):
    assert python_spec(command, VENV_PATH, PY) is None


def test_python_spec_does_not_resolve_relative_paths_in_our_cwd(tmp_path: Path, monkeypatch):
    """``bin/python`` or a PATH entry ``.`` names a file of the run's workspace: what sits at that
    path relative to Ferry's own directory says nothing about it."""
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python").symlink_to(PY)
    (tmp_path / "python").symlink_to(PY)
    monkeypatch.chdir(tmp_path)
    assert python_spec(f"{Path(PY).parent}/python a.py", VENV_PATH, PY) is not None  # absolute: judged
    assert python_spec("bin/python a.py", VENV_PATH, PY) is None
    assert python_spec("./python a.py", VENV_PATH, PY) is None
    assert python_spec("python a.py", ".:/usr/bin:/bin", PY) is None


@pytest.mark.skipif(sys.prefix == sys.base_prefix, reason="the tests' interpreter is not a venv's")
def test_python_spec_refuses_the_same_binary_outside_the_venv(tmp_path: Path):
    """The base interpreter the venv links to, or another link to it, starts without the venv's
    packages: a warm run (which has them) would not be what the cold run is."""
    base = os.path.realpath(PY)
    link = tmp_path / "bin" / "python"
    link.parent.mkdir()
    link.symlink_to(PY)
    assert python_spec(f"{base} a.py", VENV_PATH, PY) is None
    assert python_spec(f"{link} a.py", VENV_PATH, PY) is None
    assert python_spec("python a.py", f"{link.parent}:{VENV_PATH}", PY) is None
    assert python_spec(f"{Path(PY).parent / 'python3'} a.py", VENV_PATH, PY) is not None


def test_python_spec_refuses_another_interpreter(tmp_path: Path):
    other = tmp_path / "bin"
    other.mkdir()
    script = other / "tool"
    script.write_text("#!/usr/bin/env python3\nprint('hi')\n")
    script.chmod(0o755)
    assert python_spec("tool", f"{other}:{VENV_PATH}", PY) is None


# -- 2. warm and cold see the same process ----------------------------------------------------
PROBE = """
    import os, sys
    print("argv", sys.argv)
    print("name", __name__)
    print("file", globals().get("__file__"))
    print("path0", sys.path[0])
    print("cwd", os.getcwd())
    print("not-root", os.getuid() != 0)
    print("var", os.environ.get("FERRY_WARM_TEST_VAR"))
    print("stdin-empty", sys.stdin.read() == "")
    print("pid-ns", os.getpid() < 10)
    print("marker", "FERRY_SANDBOX_RUN" in os.environ)
    print("env", sorted((k, v) for k, v in os.environ.items() if k != "FERRY_SANDBOX_RUN"))
"""


@pytest.mark.parametrize("command", [
    "python probe.py one 'two words'",
    "python -u probe.py",
    "python -m probe x y",
    "python -c 'exec(open(\"probe.py\").read())' z",
])
def test_warm_run_sees_what_a_cold_run_sees(server, workspace, command):
    _write(workspace, "probe.py", PROBE)
    env = {RUN_VAR: "per-run-value"}
    warm = _run(server, workspace, command, env=env)
    cold = _run(server, workspace, command, warm=False, env=env)
    assert warm.warm is True and cold.warm is False
    assert warm.status == cold.status == "ok", (warm.stderr, cold.stderr)
    assert warm.stdout == cold.stdout
    assert warm.stderr == cold.stderr == ""
    assert "var per-run-value" in warm.stdout and "stdin-empty True" in warm.stdout
    assert "pid-ns True" in warm.stdout and "marker True" in warm.stdout
    if os.getuid() == 0:
        assert "not-root True" in warm.stdout


@pytest.mark.parametrize("command", [
    "python show.py",
    "python -m show_mod",
    "python -c 'print(sorted(globals()))'",
    "python app x",
    "python -m pkg x",
    "pytest --version",
])
def test_main_module_matches_cold(server, workspace, command):
    """``__main__``'s namespace (nothing of the server's own), directories run by their
    ``__main__.py``, packages by theirs, console scripts of the venv."""
    show = "import sys\nprint(__name__, sys.argv, sys.path[0], sorted(globals()))\n"
    _write(workspace, "show.py", show)
    _write(workspace, "show_mod.py", show)
    for d in ("app", "pkg"):
        (workspace.path / d).mkdir()
        _write(workspace, f"{d}/__main__.py", show)
    _write(workspace, "pkg/__init__.py", "")
    warm = _run(server, workspace, command)
    cold = _run(server, workspace, command, warm=False)
    assert warm.warm and warm.status == cold.status == "ok", (warm.stderr, cold.stderr)
    assert warm.stdout == cold.stdout and warm.stderr == cold.stderr


def test_threads_and_atexit_finish_before_the_run_ends(server, workspace):
    _write(workspace, "late.py", """
        import atexit, threading, time
        atexit.register(lambda: print("atexit ran", flush=True))
        def work():
            time.sleep(0.3)
            print("thread done", flush=True)
        threading.Thread(target=work).start()
        print("main done")
    """)
    warm = _run(server, workspace, "python late.py")
    cold = _run(server, workspace, "python late.py", warm=False)
    assert warm.warm and warm.status == "ok", warm.stderr
    assert warm.stdout == cold.stdout == "main done\nthread done\natexit ran\n"


def test_a_run_collects_its_own_cycles_but_never_walks_what_the_server_preloaded(server, workspace):
    _write(workspace, "cycles.py", """
        import gc, json
        class Node:
            def __del__(self):
                print("collected", flush=True)
        a, b = Node(), Node()
        a.other, b.other = b, a  # a cycle: only the collector frees it
        del a, b
        gc.collect()
        preloaded = sum(1 for o in gc.get_objects() if type(o).__module__.startswith("json"))
        print("json objects walked:", preloaded if "json.decoder" in __import__("sys").modules else "n/a")
    """)
    warm = _run(server, workspace, "python cycles.py")
    cold = _run(server, workspace, "python cycles.py", warm=False)
    assert warm.warm and warm.status == "ok", warm.stderr
    assert warm.stdout.count("collected") == cold.stdout.count("collected") == 2
    assert "json objects walked: 0" in warm.stdout  # the preload's objects are frozen in the server
    assert "json objects walked: 0" not in cold.stdout


# -- 3. exit status and tracebacks -------------------------------------------------------------
def test_uncaught_exception_traceback_matches_cold(server, workspace):
    _write(workspace, "boom.py", """
        def inner(x):
            return 1 / x

        print("before")
        inner(0)
    """)
    warm = _run(server, workspace, "python boom.py")
    cold = _run(server, workspace, "python boom.py", warm=False)
    assert warm.warm and not cold.warm
    assert warm.exit_code == cold.exit_code == 1
    assert warm.stdout == cold.stdout == "before\n"
    lines = warm.stderr.splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert lines[1].startswith(f'  File "{workspace.path / "boom.py"}", line ')
    assert lines[-1] == "ZeroDivisionError: division by zero"
    assert "warm/child.py" not in warm.stderr and "sandbox" not in warm.stderr.replace(str(workspace.path), "")
    assert warm.stderr == cold.stderr


@pytest.mark.parametrize("code, exit_code, stderr", [
    ("import sys; sys.exit(3)", 3, ""),
    ("import sys; sys.exit(0)", 0, ""),
    ("import sys; sys.exit(None)", 0, ""),
    ("import sys; sys.exit('bad input given')", 1, "bad input given\n"),
    ("raise SystemExit(256 + 7)", 7, ""),
])
def test_exit_status_matches_cold(server, workspace, code, exit_code, stderr):
    _write(workspace, "ex.py", code + "\n")
    warm = _run(server, workspace, "python ex.py")
    cold = _run(server, workspace, "python ex.py", warm=False)
    assert warm.warm
    assert warm.exit_code == cold.exit_code == exit_code
    assert warm.stderr == cold.stderr == stderr


def test_missing_module_and_missing_script(server, workspace):
    for command in ("python -m no_such_module_xyz", "python no_such_script.py"):
        warm = _run(server, workspace, command)
        cold = _run(server, workspace, command, warm=False)
        assert warm.warm, command
        assert warm.exit_code == cold.exit_code != 0, command
        assert warm.stderr == cold.stderr, command
    assert "No module named no_such_module_xyz" in _run(server, workspace, "python -m no_such_module_xyz").stderr


# -- 4. the sandbox is the same ------------------------------------------------------------------
def test_warm_run_is_isolated(server, workspace, tmp_path: Path):
    secret = tmp_path / "host_secret.txt"
    secret.write_text("TOP-SECRET")
    outside = tmp_path / "outside.txt"
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    _write(workspace, "escape.py", f"""
        import pathlib, resource, socket
        s = socket.socket()
        s.settimeout(3)
        try:
            s.connect(("127.0.0.1", {port}))
            print("CONNECTED")
        except OSError as exc:
            print("NET-BLOCKED")
        try:
            print("READ", pathlib.Path({str(secret)!r}).read_text())
        except OSError:
            print("SECRET-UNREADABLE")
        for p in [{str(outside)!r}, "/usr/evil", "/etc/evil", {str(ferry_root() / 'evil')!r}]:
            try:
                pathlib.Path(p).write_text("pwned")
                print("WROTE", p)
            except OSError:
                print("DENIED")
        pathlib.Path("inside.txt").write_text("ok")
        status = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines() if ":" in l)
        for key in ("CapEff", "CapPrm", "CapInh", "CapBnd", "CapAmb", "NoNewPrivs"):
            print(key, status[key].strip())
        print("NOFILE", resource.getrlimit(resource.RLIMIT_NOFILE))
        try:
            big = bytearray(1536 * 2**20)
            print("ALLOCATED")
        except MemoryError:
            print("MEMORY-LIMITED")
    """)
    try:
        res = _run(server, workspace, "python escape.py", limits=small_limits(open_files=123))
    finally:
        srv.close()
    assert res.warm and res.status == "ok", res.stderr
    out = res.stdout.splitlines()
    assert "NET-BLOCKED" in out and "CONNECTED" not in out
    assert "SECRET-UNREADABLE" in out and "TOP-SECRET" not in res.stdout
    assert out.count("DENIED") == 4 and not any(line.startswith("WROTE") for line in out)
    assert not outside.exists()
    assert (workspace.path / "inside.txt").read_text() == "ok"
    for key in ("CapEff", "CapPrm", "CapInh", "CapBnd", "CapAmb"):
        assert f"{key} 0000000000000000" in out, res.stdout
    assert "NoNewPrivs 1" in out
    assert "NOFILE (123, 123)" in out
    assert "MEMORY-LIMITED" in out  # small_limits: 1 GiB of address space


# -- 5. supervision: timeout, cancel, strays ---------------------------------------------------
@pytest.fixture
def command_pids(monkeypatch):
    """The host pids of the warm commands started during the test (spying on start_warm)."""
    pids: list[int] = []
    real = sandbox.execute.start_warm

    def spy(*args, **kwargs):
        proc = real(*args, **kwargs)
        pids.append(proc.command_pid)
        return proc

    monkeypatch.setattr(sandbox.execute, "start_warm", spy)
    return pids


def test_timeout_kills_the_warm_command(server, workspace, command_pids):
    _write(workspace, "spin.py", """
        import signal
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # only SIGKILL ends it
        print('spinning', flush=True)
        while True:
            pass
    """)
    res = _run(server, workspace, "python spin.py", limits=small_limits(timeout_s=2.0))
    assert res.warm
    assert res.status == "timeout" and res.timed_out
    assert res.stdout == "spinning\n"
    assert len(command_pids) == 1
    assert _gone(command_pids[0])


def test_cancel_stops_the_warm_command(server, workspace, command_pids):
    _write(workspace, "wait.py", "import time\nprint('up', flush=True)\ntime.sleep(60)\n")
    cancel = threading.Event()
    timer = threading.Timer(0.5, cancel.set)
    timer.start()
    try:
        res = _run(server, workspace, "python wait.py", limits=small_limits(timeout_s=30.0), cancel=cancel)
    finally:
        timer.cancel()
    assert res.warm
    assert res.status == "cancelled" and not res.timed_out
    assert command_pids and _gone(command_pids[0])


def _ppid(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def test_run_ends_when_its_waiter_is_killed(server, workspace, command_pids):
    """The process waiting for the command (outside the sandbox) is killed: the command dies
    with it and the run ends as killed, not at its timeout."""
    _write(workspace, "wait.py", "import time\nprint('up', flush=True)\ntime.sleep(60)\n")

    def kill_waiter() -> None:
        while not command_pids:
            time.sleep(0.02)
        os.kill(_ppid(command_pids[0]), signal.SIGKILL)

    killer = threading.Thread(target=kill_waiter, daemon=True)
    killer.start()
    res = _run(server, workspace, "python wait.py", limits=small_limits(timeout_s=60.0))
    killer.join(timeout=5)
    assert res.warm
    assert res.status == "killed" and not res.timed_out and res.signal == signal.SIGKILL
    assert _gone(command_pids[0])


def _pids_with_cmdline(needle: bytes) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if needle in Path(f"/proc/{entry}/cmdline").read_bytes():
                found.append(int(entry))
        except OSError:
            continue
    return found


def test_daemon_left_behind_is_killed(server, workspace):
    arg = f"60.{uuid.uuid4().int % 10**9}"  # a sleep argument no other process has
    _write(workspace, "daemon.py", f"""
        import subprocess
        p = subprocess.Popen(["sleep", "{arg}"], start_new_session=True)
        print("daemon started")
    """)
    res = _run(server, workspace, "python daemon.py")
    assert res.warm and res.status == "ok", res.stderr
    assert res.stdout == "daemon started\n"
    assert res.strays_killed >= 1
    assert all(_gone(p) for p in _pids_with_cmdline(b"sleep\0" + arg.encode()))


def test_output_cap_applies_to_warm_runs(server, workspace):
    _write(workspace, "loud.py", "import sys\nsys.stdout.write('x' * 100_000)\nprint('err', file=sys.stderr)\n")
    warm = _run(server, workspace, "python loud.py")
    cold = _run(server, workspace, "python loud.py", warm=False)
    assert warm.warm and warm.status == cold.status == "ok"
    assert warm.stdout_bytes == cold.stdout_bytes == 100_000
    assert warm.stdout_dropped == cold.stdout_dropped > 0
    assert warm.stdout == cold.stdout and warm.stderr == cold.stderr == "err\n"


def test_concurrent_warm_runs_stay_apart(server, repo, tmp_path: Path):
    from sandbox import create_workspace

    spaces = [create_workspace(repo, root=tmp_path / f"ws{i}") for i in range(3)]
    results: dict[int, object] = {}

    def one(i: int) -> None:
        _write(spaces[i], "who.py", f"import os, time\ntime.sleep(0.5)\nopen('mine.txt', 'w').write('{i}')\n"
                                    "print(os.environ['FERRY_WARM_TEST_VAR'], sorted(os.listdir('.')))\n")
        results[i] = _run(server, spaces[i], "python who.py", env={RUN_VAR: f"run{i}"})

    threads = [threading.Thread(target=one, args=(i,)) for i in range(3)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for i, ws in enumerate(spaces):
            res = results[i]
            assert res.warm and res.status == "ok", res.stderr
            assert res.stdout == f"run{i} ['data.txt', 'mine.txt', 'who.py']\n"
            assert (ws.path / "mine.txt").read_text() == str(i)
    finally:
        for ws in spaces:
            ws.cleanup()


# -- 6. fallbacks: the run is still right, only cold -------------------------------------------
def test_env_mismatch_falls_back_to_cold(server, workspace):
    _write(workspace, "env.py", "import os\nprint(os.environ.get('FERRY_STATIC_OTHER'))\n")
    env = {"FERRY_STATIC_OTHER": "yes"}  # not a per-run key: the server's interpreter lacks it
    assert not server.accepts(scrubbed_env(dict(os.environ), env, path=VENV_PATH))
    res = _run(server, workspace, "python env.py", env=env)
    assert res.warm is False and res.status == "ok" and res.stdout == "yes\n"


def test_server_whose_preload_fails_falls_back_to_cold(workspace):
    bad = WarmServer(_server_env(), ["no_such_module_xyz"], dynamic_keys=frozenset({RUN_MARKER_ENV}))
    try:
        assert bad.wait_ready() is False
        assert "no_such_module_xyz" in (bad.failure or "")
        _write(workspace, "hi.py", "print('hi')\n")
        res = _run(bad, workspace, "python hi.py")
        assert res.warm is False and res.status == "ok" and res.stdout == "hi\n"
    finally:
        bad.close()


def test_shell_pipeline_runs_cold(server, workspace):
    _write(workspace, "hi.py", "print('hi')\n")
    res = _run(server, workspace, "python hi.py | tr a-z A-Z")
    assert res.warm is False and res.status == "ok" and res.stdout == "HI\n"


@pytest.mark.skipif("unshare" not in detect().available, reason="unshare cannot run here")
def test_weaker_isolation_runs_cold(server, workspace):
    _write(workspace, "hi.py", "print('hi')\n")
    res = _run(server, workspace, "python hi.py", isolation="unshare")
    cold = _run(server, workspace, "python hi.py", warm=False, isolation="unshare")
    assert res.isolation == cold.isolation == "unshare"
    assert res.warm is False
    # (where the run's uid cannot reach this interpreter, both fail the same way)
    outcome = lambda r: (r.status, r.exit_code, r.stdout, r.stderr)  # noqa: E731
    assert outcome(res) == outcome(cold)


def test_after_fork_hook_that_cannot_load_falls_back_to_cold(workspace):
    srv = WarmServer(_server_env(), [], after_fork="no_such_module_xyz:hook", dynamic_keys=frozenset({RUN_MARKER_ENV}))
    try:
        assert srv.wait_ready()
        _write(workspace, "hi.py", "print('hi')\n")
        res = _run(srv, workspace, "python hi.py")
        assert res.warm is False and res.status == "ok" and res.stdout == "hi\n"
        assert srv.alive()  # the server itself is fine: only that run went cold
    finally:
        srv.close()


def test_closed_server_falls_back_to_cold(workspace):
    srv = WarmServer(_server_env(), [], dynamic_keys=frozenset({RUN_MARKER_ENV}))
    assert srv.wait_ready()
    srv.close()
    _write(workspace, "hi.py", "print('hi')\n")
    res = _run(srv, workspace, "python hi.py")
    assert res.warm is False and res.status == "ok" and res.stdout == "hi\n"


# -- 7. the user's modules win over Ferry's ------------------------------------------------------
def test_user_module_named_sandbox_is_imported(server, workspace):
    _write(workspace, "sandbox.py", "WHO = 'user module'\n")
    _write(workspace, "use.py", "import sandbox\nprint(sandbox.WHO, sandbox.__file__)\n")
    warm = _run(server, workspace, "python use.py")
    cold = _run(server, workspace, "python use.py", warm=False)
    assert warm.warm and warm.status == "ok", warm.stderr
    assert warm.stdout == cold.stdout == f"user module {workspace.path / 'sandbox.py'}\n"


def test_server_outlives_the_thread_that_started_it(workspace):
    """Ferry starts the server from whichever thread needs it first; that thread ending must not
    end the server (nor the runs forked from it)."""
    box: dict[str, WarmServer] = {}

    def start() -> None:
        srv = WarmServer(_server_env(), [], dynamic_keys=frozenset({RUN_MARKER_ENV}))
        srv.wait_ready()
        box["srv"] = srv

    starter = threading.Thread(target=start)
    starter.start()
    starter.join()
    deadline = time.monotonic() + 10  # join() returns before the kernel has ended the thread
    while os.path.exists(f"/proc/self/task/{starter.native_id}") and time.monotonic() < deadline:
        time.sleep(0.01)
    srv = box["srv"]
    try:
        _write(workspace, "hi.py", "print('hi')\n")
        res = _run(srv, workspace, "python hi.py")
        assert srv.alive()
        assert res.warm and res.status == "ok" and res.stdout == "hi\n"
    finally:
        srv.close()


# -- 8. the server does not outlive its owner ----------------------------------------------------
OWNER = """
import os, sys, time
sys.path.insert(0, {root!r})
from sandbox import WarmServer
srv = WarmServer({{"PATH": "/usr/bin:/bin"}}, [])
assert srv.wait_ready(), srv.failure
print("ready", flush=True)
time.sleep(120)
"""


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    for task in os.listdir(f"/proc/{pid}/task"):
        kids += [int(k) for k in Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
    return kids


def test_server_dies_with_its_owner():
    owner = subprocess.Popen([PY, "-c", OWNER.format(root=str(ferry_root()))], stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout is not None and owner.stdout.readline() == "ready\n"
        servers = _children(owner.pid)
        assert len(servers) == 1
        assert is_alive(servers[0])
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait()
    assert _gone(servers[0])


# --- cancel and close while a run waits for its server ------------------------------------------


@pytest.fixture
def slow_server(tmp_path):
    """A server whose preload takes 60 s (a module that sleeps on import): runs wait for it."""
    mods = tmp_path / "slowmods"
    mods.mkdir()
    (mods / "ferry_slow_import.py").write_text("import time\ntime.sleep(60)\n")
    env = scrubbed_env(dict(os.environ), {"PYTHONPATH": str(mods)}, path=VENV_PATH)
    srv = WarmServer(env, ["ferry_slow_import"], dynamic_keys=frozenset({RUN_MARKER_ENV}))
    yield srv, {"PYTHONPATH": str(mods)}
    srv.close()


def test_a_run_cancelled_while_waiting_for_its_server_starts_nothing(slow_server, workspace):
    srv, env = slow_server
    _write(workspace, "mark.py", "open('ran.txt', 'w').write('ran')\n")
    cancel = threading.Event()
    threading.Timer(0.5, cancel.set).start()
    res = _run(srv, workspace, "python mark.py", env=env, cancel=cancel)
    assert res.status == "cancelled" and not res.warm and res.exit_code is None
    assert "cancelled while waiting" in (res.warm_fallback or "")
    assert not (workspace.path / "ran.txt").exists()  # neither a warm nor a cold start happened
    assert srv.alive() and srv.failure is None  # the server goes on importing for later runs


def test_a_server_closed_while_a_run_waits_lets_it_start_cold(slow_server, workspace):
    srv, env = slow_server
    _write(workspace, "hello.py", "print('hello')\n")
    threading.Timer(0.5, srv.close).start()
    res = _run(srv, workspace, "python hello.py", env=env)
    assert res.status == "ok" and res.stdout == "hello\n" and not res.warm
    assert "closed" in (res.warm_fallback or "")
    assert not srv.alive()


# -- whole-run limits and the disk cap hold for warm runs ----------------------------------------
requires_cgroups = pytest.mark.skipif(detect_control().level == "rlimits",
                                      reason=f"no whole-run limits here: {detect_control().describe()}")


@requires_cgroups
def test_warm_runs_are_inside_the_run_cgroup(server, workspace):
    # one warm process far below its address-space limit but over the run's memory cap
    _write(workspace, "hog.py", """
        b = bytearray(300 << 20)
        for i in range(0, len(b), 4096):
            b[i] = 1
        print("survived")
    """)
    limits = small_limits(memory_bytes=1024**3, run_memory_bytes=200 * 1024**2, timeout_s=20)
    res = _run(server, workspace, "python hog.py", limits=limits)
    assert res.warm, res.warm_fallback
    assert res.limit_hit == "memory" and "survived" not in res.stdout, (res.stdout, res.stderr)
    # and its forks count against the run's process cap
    _write(workspace, "forks.py", """
        import os, time
        n = 0
        try:
            for _ in range(100):
                if os.fork() == 0:
                    time.sleep(5)
                    os._exit(0)
                n += 1
        finally:
            print("forked", n)
    """)
    res = _run(server, workspace, "python forks.py", limits=small_limits(processes=512, run_processes=32))
    assert res.warm and res.limit_hit == "processes", (res.stdout, res.stderr)
    assert int(res.stdout.split()[-1]) < 32


@pytest.mark.skipif(bool(mount_reason()), reason=f"no run space here: {mount_reason()}")
def test_warm_runs_see_the_capped_tmp_and_shm(server, repo: Path):
    cap = 64 * 1024**2
    with open_run_space(cap) as space:
        ws = create_workspace(repo, root=space.workspace_root)
        _write(ws, "fill.py", """
            import os
            for d in ("/tmp", "/dev/shm"):
                st = os.statvfs(d)
                print(d, st.f_blocks * st.f_frsize)
            with open("/tmp/big", "wb") as fh:
                for _ in range(100):
                    fh.write(b"x" * (1 << 20))
        """)
        limits = small_limits(disk_bytes=cap, file_size_bytes=1024**3)
        res = _run(server, ws, "python fill.py", limits=limits, space=space)
        assert res.warm, res.warm_fallback
        assert f"/tmp {cap}" in res.stdout and f"/dev/shm {cap}" in res.stdout
        assert res.limit_hit == "disk_quota" and "No space left on device" in res.stderr
        assert (space.tmp / "big").stat().st_size < cap  # the run's /tmp is the space's tmp/
