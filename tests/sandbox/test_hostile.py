"""The hostile-program battery: each program is contained and the result says how."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import textwrap
import time
from pathlib import Path

import pytest

from sandbox import detect

from .conftest import PY, VENV_PATH, requires_bwrap

pytestmark = requires_bwrap


def test_network_connect_is_refused(run_py):
    # A listening socket on the host: the child must not reach it (no network namespace escape).
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    try:
        res = run_py(textwrap.dedent(f"""
            import socket
            s = socket.socket()
            s.settimeout(3)
            try:
                s.connect(("127.0.0.1", {port}))
                print("CONNECTED")
            except OSError as exc:
                print("BLOCKED", type(exc).__name__)
            try:
                socket.create_connection(("1.1.1.1", 80), timeout=3)
                print("INTERNET")
            except OSError as exc:
                print("NO-INTERNET", type(exc).__name__)
        """))
    finally:
        srv.close()
    assert res.status == "ok", res.stderr
    assert "BLOCKED" in res.stdout and "CONNECTED" not in res.stdout
    assert "NO-INTERNET" in res.stdout
    assert res.isolation == "bwrap"


def test_write_outside_workspace_fails(run_py, repo: Path, tmp_path: Path):
    target = tmp_path / "outside.txt"
    res = run_py(textwrap.dedent(f"""
        import pathlib
        for p in [{str(target)!r}, {str(repo / 'data.txt')!r}, "/usr/evil", "/work/evil", "/etc/evil"]:
            try:
                pathlib.Path(p).write_text("pwned")
                print("WROTE", p)
            except OSError as exc:
                print("DENIED", p, type(exc).__name__)
        pathlib.Path("inside.txt").write_text("ok")
        pathlib.Path("/tmp/scratch").write_text("ok")
        print("INSIDE-OK")
    """))
    assert res.status == "ok", res.stderr
    assert "WROTE" not in res.stdout
    assert "INSIDE-OK" in res.stdout
    assert not target.exists()
    assert (repo / "data.txt").read_text() == "original\n"  # the original repo is untouched


def test_symlink_out_of_workspace_is_not_followed_to_host(run_py, workspace, tmp_path: Path):
    secret = tmp_path / "host_secret.txt"
    secret.write_text("TOP-SECRET")
    (workspace.path / "link").symlink_to(secret)
    (workspace.path / "rootlink").symlink_to("/root")
    res = run_py(textwrap.dedent("""
        import os
        for p in ["link", "rootlink/.bashrc"]:
            try:
                print("READ", open(p).read())
            except OSError as exc:
                print("NOPE", p, type(exc).__name__)
        try:
            open("link", "w").write("overwrite")
            print("WROTE-THROUGH")
        except OSError as exc:
            print("NOWRITE", type(exc).__name__)
        print(os.listdir("/root"))
    """))
    assert res.status == "ok", res.stderr
    assert "TOP-SECRET" not in res.stdout and "WROTE-THROUGH" not in res.stdout
    assert secret.read_text() == "TOP-SECRET"


def test_parent_secrets_never_reach_child(run_py, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-should-not-leak")
    monkeypatch.setenv("FERRY_API_TOKEN", "tok-should-not-leak")
    monkeypatch.setenv("MY_SERVICE_SECRET", "sec-should-not-leak")
    res = run_py(
        "import os\nprint(sorted(os.environ))\nfor p in os.listdir('/proc'):\n"
        "    if p.isdigit():\n"
        "        try: print(open(f'/proc/{p}/environ','rb').read())\n"
        "        except OSError: pass",
        env={"FERRY_SEED": "3", "GITHUB_TOKEN": "gh-should-not-leak"},
    )
    assert res.status == "ok", res.stderr
    for leaked in ("sk-should-not-leak", "tok-should-not-leak", "sec-should-not-leak", "gh-should-not-leak"):
        assert leaked not in res.stdout
    assert "FERRY_SEED" in res.stdout and "OPENAI_API_KEY" not in res.stdout


@pytest.mark.skipif(not detect().drops_uid and os.geteuid() == 0, reason="process limit needs a non-root child")
def test_fork_bomb_is_contained(run_py):
    res = run_py(textwrap.dedent("""
        import os, time
        n = 0
        while True:
            try:
                if os.fork() == 0:
                    time.sleep(30)
                    os._exit(0)
                n += 1
            except OSError as exc:
                print("FORK-REFUSED after", n, type(exc).__name__, flush=True)
                break
    """), processes=32, timeout_s=10)
    assert "FORK-REFUSED" in res.stdout, res.stdout + res.stderr
    assert res.status == "ok"  # the parent handled the refusal; the sleepers died with the run
    assert not res.timed_out


def test_memory_bomb_is_contained(run_py):
    res = run_py("x = []\nwhile True: x.append(bytearray(64 * 1024 * 1024))", memory_bytes=512 * 1024**2)
    assert res.status in ("failed", "killed")
    assert "MemoryError" in res.stderr or res.signal is not None


def test_infinite_loop_hits_timeout(run_py):
    start = time.monotonic()
    res = run_py("while True: pass", timeout_s=2)
    assert res.status == "timeout" and res.timed_out and res.limit_hit == "timeout"
    assert time.monotonic() - start < 15


def test_cpu_time_limit(run_py):
    res = run_py("while True: pass", timeout_s=20, cpu_seconds=1)
    assert res.status == "killed"
    assert res.limit_hit == "cpu_time"


def test_gigabytes_of_output_are_capped(run_py):
    res = run_py(
        "import sys\nchunk = b'x' * (1 << 20)\nwhile True: sys.stdout.buffer.write(chunk)",
        output_kill_bytes=200 * 1024**2, timeout_s=20,
    )
    assert res.status == "killed" and res.limit_hit == "output"
    assert res.stdout_bytes >= 200 * 1024**2
    assert len(res.stdout) < 16 * 1024  # head + marker + tail only
    assert res.stdout_dropped > 0 and "bytes of output dropped" in res.stdout


def test_daemon_does_not_outlive_the_run(run_py, tmp_path: Path):
    res = run_py(textwrap.dedent("""
        import os, sys, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                sys.stdout.close(); sys.stderr.close()
                with open("daemon.pid", "w") as fh:
                    fh.write(str(os.getpid()))
                while True:
                    with open("heartbeat", "a") as fh:
                        fh.write("x")
                    time.sleep(0.1)
            os._exit(0)
        time.sleep(0.5)
        print("parent done")
    """))
    assert res.status == "ok"
    # The daemon (in the run's pid namespace / uid) is gone: the heartbeat stops growing.
    ws_heartbeat = [p for p in tmp_path.rglob("heartbeat")]
    assert ws_heartbeat, "daemon never started"
    size = ws_heartbeat[0].stat().st_size
    time.sleep(0.6)
    assert ws_heartbeat[0].stat().st_size == size


def test_child_ignoring_sigterm_is_killed(run_py):
    start = time.monotonic()
    res = run_py(textwrap.dedent("""
        import signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("ignoring", flush=True)
        while True:
            time.sleep(0.1)
    """), timeout_s=2)
    assert res.status == "timeout"
    assert "ignoring" in res.stdout
    assert time.monotonic() - start < 15


@pytest.mark.parametrize("level", ["unshare", "rlimits"])
def test_fallback_levels_are_reported_and_still_limit(run_py, level):
    if level not in detect().available:
        pytest.skip(f"{level} not available here")
    res = run_py("while True: pass", isolation=level, timeout_s=2)
    assert res.isolation == level
    assert res.status == "timeout"
    net = run_py("import socket\ntry:\n socket.create_connection(('1.1.1.1', 80), timeout=2); print('NET')\n"
                 "except OSError: print('NONET')", isolation=level)
    if level == "unshare":
        assert "NONET" in net.stdout


def test_workspace_inside_a_read_only_tree_stays_writable(tmp_path: Path, repo: Path):
    from sandbox import create_workspace, run_in_sandbox

    from .conftest import PY, VENV_PATH, small_limits

    ro = tmp_path / "ro_tree"
    ro.mkdir()
    ws = create_workspace(repo, root=ro / "nested" / "runs")
    try:
        res = run_in_sandbox(
            [PY, "-c", f"open('mine.txt','w').write('ok')\ntry:\n    open({str(ro / 'evil.txt')!r},'w')\n"
                       "    print('RO-BROKEN')\nexcept OSError:\n    print('RO-OK')"],
            ws.path, limits=small_limits(), readable=[ro], path_env=VENV_PATH)
        assert res.status == "ok", res.stderr
        assert "RO-OK" in res.stdout and (ws.path / "mine.txt").read_text() == "ok"
        assert not (ro / "evil.txt").exists()
    finally:
        ws.cleanup()


def test_host_sockets_are_unreachable(run_py, tmp_path: Path):
    path_sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    path_sock.bind(str(tmp_path / "host.sock"))
    path_sock.listen(1)
    abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    name = f"\0ferry-test-{os.getpid()}"
    abstract.bind(name)
    abstract.listen(1)
    try:
        res = run_py(textwrap.dedent(f"""
            import os, socket
            for label, addr in (("path", {str(tmp_path / 'host.sock')!r}), ("abstract", {name!r})):
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    s.connect(addr)
                    print("REACHED", label)
                except OSError as exc:
                    print("UNREACHABLE", label, type(exc).__name__)
            print("RUN", os.path.exists("/run"), os.path.exists("/var/run"))
        """))
    finally:
        path_sock.close()
        abstract.close()
    assert res.status == "ok", res.stderr
    assert "REACHED" not in res.stdout
    assert "UNREACHABLE path" in res.stdout and "UNREACHABLE abstract" in res.stdout
    assert "RUN False False" in res.stdout


@pytest.mark.parametrize("isolation", ["rlimits", None])
def test_run_does_not_outlive_an_interrupted_ferry(workspace, tmp_path: Path, isolation):
    """Ctrl-C (or any exception) in the process supervising a run takes the run down with it, also
    without bubblewrap's die-with-parent (the weakest isolation level)."""
    driver = tmp_path / "driver.py"
    driver.write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
        from sandbox import run_in_sandbox, Limits
        code = "import time\\nwhile True:\\n    open('heartbeat', 'a').write('x')\\n    time.sleep(0.1)\\n"
        run_in_sandbox([{PY!r}, "-c", code], {str(workspace.path)!r}, limits=Limits(timeout_s=120),
                       path_env={VENV_PATH!r}, isolation={isolation!r})
    """))
    proc = subprocess.Popen([PY, str(driver)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    heartbeat = workspace.path / "heartbeat"
    deadline = time.monotonic() + 60
    while not heartbeat.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
    assert heartbeat.exists(), proc.communicate(timeout=10)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=180)  # the teardown, on a machine the rest of the suite loads
    assert b"KeyboardInterrupt" in err
    size = heartbeat.stat().st_size
    time.sleep(0.6)
    assert heartbeat.stat().st_size == size, "the sandboxed program kept running after Ferry was interrupted"
