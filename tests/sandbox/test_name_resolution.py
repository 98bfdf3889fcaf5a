"""Loopback name resolution inside the sandbox: its own generated /etc/hosts, never the host's.

On a user's machine the host's /etc/hosts was unreadable for the run's uid, so `localhost` did not
resolve and torchrun --standalone could not reach its rendezvous store. The sandbox no longer binds
the host's file at all (which is what that machine amounts to): these tests hold on any host.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from sandbox.isolation import SANDBOX_HOSTNAME, SANDBOX_HOSTS, bwrap_prefix, hosts_file

from .conftest import requires_bwrap


def test_the_host_hosts_file_is_never_bound(tmp_path: Path):
    argv = bwrap_prefix(workspace=tmp_path, writable=[], readable=[], uid=None, tmp_bytes=1 << 20)
    pairs = list(zip(argv, argv[1:], argv[2:], strict=False))
    sources = [src for flag, src, dest in pairs if flag in ("--ro-bind", "--ro-bind-try", "--bind") and
               dest == "/etc/hosts"]
    assert sources == [str(hosts_file())]
    assert "/etc/hosts" not in sources
    assert hosts_file().read_text() == SANDBOX_HOSTS
    assert hosts_file().stat().st_mode & 0o777 == 0o644


@requires_bwrap
def test_localhost_and_the_hostname_resolve_inside(run_py):
    res = run_py(textwrap.dedent("""
        import socket
        print("HOSTS", open("/etc/hosts").read().replace("\\n", "|"))
        print("NAME", socket.gethostname())
        print("LOCAL", socket.gethostbyname("localhost"))
        print("SELF", socket.gethostbyname(socket.gethostname()))
        print("V6", sorted({a[4][0] for a in socket.getaddrinfo("localhost", 0, socket.AF_INET6)}))
        try:
            open("/etc/hosts", "a").write("1.2.3.4 evil\\n")
            print("WRITE allowed")
        except OSError:
            print("WRITE refused")
    """))
    assert res.status == "ok", res.stderr
    out = dict(line.split(" ", 1) for line in res.stdout.splitlines())
    assert out["HOSTS"] == SANDBOX_HOSTS.replace("\n", "|")
    assert out["NAME"] == SANDBOX_HOSTNAME
    assert out["LOCAL"] == "127.0.0.1" and out["SELF"] == "127.0.0.1"
    assert out["V6"] == "['::1']"
    assert out["WRITE"] == "refused"


@requires_bwrap
def test_a_tcp_store_on_localhost_works_inside(run_py):
    # what torchrun --standalone's c10d rendezvous does first: a store on localhost, reached by name
    res = run_py(textwrap.dedent("""
        import socket, threading
        srv = socket.create_server(("localhost", 0))
        port = srv.getsockname()[1]
        threading.Thread(target=lambda: srv.accept()[0].sendall(b"ok"), daemon=True).start()
        c = socket.create_connection((socket.gethostname(), port), timeout=5)
        print("GOT", c.recv(2).decode())
    """))
    assert res.status == "ok", res.stderr
    assert "GOT ok" in res.stdout


def test_the_hosts_file_is_made_once_not_per_process(tmp_path: Path):
    """Every Ferry process used to make its own temporary directory for it, removed at exit: each
    killed run (Ctrl-C twice, a CI timeout) left one in /tmp. Now one file in Ferry's cache serves all;
    a cache directory others can write into is refused for a private one."""
    import os
    import subprocess
    import sys

    code = "from sandbox.isolation import hosts_file; print(hosts_file())"
    root = str(Path(__file__).resolve().parents[2])

    def made(cache: Path) -> Path:
        env = {**os.environ, "XDG_CACHE_HOME": str(cache), "PYTHONPATH": root}
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60,
                             check=True).stdout.strip()
        return Path(out)

    cache = tmp_path / "cache"
    first, second = made(cache), made(cache)
    assert first == second == cache / "ferry" / "sandbox" / first.name
    assert first.read_text() == SANDBOX_HOSTS and first.stat().st_mode & 0o777 == 0o644
    assert sorted(p.name for p in first.parent.iterdir()) == [first.name]
    first.chmod(0o666)  # a file someone could have changed is replaced, not used
    assert made(cache) == first and first.stat().st_mode & 0o777 == 0o644
    shared = tmp_path / "shared"
    (shared / "ferry" / "sandbox").mkdir(parents=True)
    (shared / "ferry").chmod(0o777)
    private = made(shared)
    assert private.parent.name.startswith("ferry-etc-") and not private.exists()  # removed at its exit
