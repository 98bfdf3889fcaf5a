"""The kernel surface a bubblewrap run reaches (``sandbox.seccomp``, capability drops): namespace,
mount, bpf, keyring, perf and userfaultfd calls are refused, no capability set holds anything, on
cold and warm runs alike; ordinary programs (threads, fork, spawn) still work."""

from __future__ import annotations

import os
import struct
import textwrap

import pytest

from sandbox import WarmServer, WarmStart, python_spec, run_in_sandbox, seccomp
from sandbox.env import scrubbed_env
from sandbox.execute import RUN_MARKER_ENV

from .conftest import PY, VENV_PATH, requires_bwrap, small_limits

pytestmark = requires_bwrap

# Each check prints NAME=errno (0: the call succeeded).
PROBE = textwrap.dedent("""
    import ctypes, errno, os, sys
    libc = ctypes.CDLL(None, use_errno=True)
    NR = {"x86_64": dict(bpf=321, keyctl=250, add_key=248, perf_event_open=298, userfaultfd=323, mount=165,
                         setns=308, unshare=272, ptrace=101, personality=135, io_uring_setup=425),
          "aarch64": dict(bpf=280, keyctl=219, add_key=217, perf_event_open=241, userfaultfd=282, mount=40,
                          setns=268, unshare=97, ptrace=117, personality=92, io_uring_setup=425)}[os.uname().machine]
    def call(name, *args):
        ctypes.set_errno(0)
        ret = libc.syscall(NR[name], *[ctypes.c_long(a) for a in args])
        return 0 if ret >= 0 else ctypes.get_errno()
    out = {}
    out["bpf"] = call("bpf", 0, 0, 0)
    out["keyctl"] = call("keyctl", 0, 0)
    out["add_key"] = call("add_key", 0, 0, 0, 0, 0)
    out["perf_event_open"] = call("perf_event_open", 0, 0, -1, -1, 0)
    out["userfaultfd"] = call("userfaultfd", 0)
    out["mount"] = call("mount", 0, 0, 0, 0, 0)
    out["setns"] = call("setns", 0, 0)
    out["ptrace"] = call("ptrace", 0, 0, 0, 0)
    out["io_uring_setup"] = call("io_uring_setup", 1, 0)
    out["personality_query"] = call("personality", 0xffffffff)
    out["personality_norandom"] = call("personality", 0x0040000)
    ctypes.set_errno(0)  # what os.unshare(os.CLONE_NEWUSER) does (Python 3.12+)
    out["unshare_newuser"] = 0 if libc.unshare(0x10000000) == 0 else ctypes.get_errno()
    caps = {}
    for line in open("/proc/self/status"):
        key, _, value = line.partition(":")
        if key in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "Seccomp", "NoNewPrivs"):
            caps[key] = value.strip()
    for k, v in sorted({**out, **caps}.items()):
        print(f"{k}={v}")
""")

CAP_SETS = ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")


def _parse(stdout: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in stdout.splitlines() if "=" in line)


def _assert_refused(values: dict[str, str]) -> None:
    eperm = str(__import__("errno").EPERM)
    for name in ("bpf", "keyctl", "add_key", "perf_event_open", "userfaultfd", "mount", "setns", "ptrace",
                 "io_uring_setup", "unshare_newuser", "personality_norandom"):
        assert values[name] == eperm, (name, values)
    assert values["personality_query"] == "0", values  # the harmless query stays allowed
    for key in CAP_SETS:
        assert int(values[key], 16) == 0, (key, values)
    assert values["Seccomp"] == "2", values  # filter mode
    assert values["NoNewPrivs"] == "1", values


@pytest.fixture
def probe_ws(workspace):
    (workspace.path / "probe.py").write_text(PROBE)
    return workspace


def test_filter_is_built_for_this_machine_and_refuses_elsewhere():
    program = seccomp.filter_program()
    assert program is not None and len(program) % 8 == 0
    assert seccomp.filter_program("riscv64") is None
    assert "riscv64" in (seccomp.unavailable_reason("riscv64") or "")
    # starts by checking the audit arch, ends allowing everything else
    code, _, _, k = struct.unpack("=HBBI", program[:8])
    assert (code, k) == (0x20, 4)
    assert struct.unpack("=HBBI", program[-8:])[3] == seccomp.RET_ALLOW


def test_cold_run_refuses_namespace_mount_bpf_and_has_no_capabilities(probe_ws):
    res = run_in_sandbox([PY, "probe.py"], probe_ws.path, limits=small_limits(), path_env=VENV_PATH)
    assert res.status == "ok", res.stderr
    _assert_refused(_parse(res.stdout))
    assert res.seccomp.startswith("on"), res.seccomp


def test_cold_shell_unshare_and_mount_fail(workspace):
    script = ("unshare -Urm true && echo UNSHARE_OK; "
              "mkdir -p /tmp/m && mount -t tmpfs none /tmp/m && echo MOUNT_OK; echo done")
    res = run_in_sandbox(["/bin/sh", "-c", script], workspace.path, limits=small_limits(), path_env=VENV_PATH)
    assert res.status == "ok", res.stderr
    assert "done" in res.stdout
    assert "UNSHARE_OK" not in res.stdout and "MOUNT_OK" not in res.stdout, res.stdout


def test_warm_run_gets_the_same_filter_and_capability_state(probe_ws):
    env = scrubbed_env(dict(os.environ), {}, path=VENV_PATH)
    server = WarmServer(env, ["json"], dynamic_keys=frozenset({RUN_MARKER_ENV}))
    try:
        assert server.wait_ready(), server.failure
        spec = python_spec("python probe.py", VENV_PATH, PY)
        assert spec is not None
        res = run_in_sandbox(["/bin/sh", "-c", "python probe.py"], probe_ws.path, limits=small_limits(),
                             path_env=VENV_PATH, warm=WarmStart(server, spec))
    finally:
        server.close()
    assert res.warm, res.warm_fallback
    assert res.status == "ok", res.stderr
    _assert_refused(_parse(res.stdout))


def test_threads_fork_and_spawn_still_work(workspace):
    (workspace.path / "work.py").write_text(textwrap.dedent("""
        import multiprocessing as mp, threading
        def sq(x):
            return x * x
        if __name__ == "__main__":
            box = []
            ts = [threading.Thread(target=lambda i=i: box.append(i)) for i in range(8)]
            [t.start() for t in ts]; [t.join() for t in ts]
            for method in ("fork", "spawn"):
                with mp.get_context(method).Pool(2) as pool:
                    print(method, sum(pool.map(sq, range(5))))
            print("threads", len(box))
    """))
    res = run_in_sandbox([PY, "work.py"], workspace.path, limits=small_limits(timeout_s=60.0), path_env=VENV_PATH)
    assert res.status == "ok", res.stderr
    assert "fork 30" in res.stdout and "spawn 30" in res.stdout and "threads 8" in res.stdout, res.stdout


@pytest.mark.parametrize("level", ["unshare", "rlimits"])
def test_weaker_levels_empty_every_capability_set(workspace, level):
    from sandbox import detect

    if level not in detect().available:
        pytest.skip(f"{level} not available here")
    res = run_in_sandbox(["/bin/sh", "-c", "grep -E '^Cap' /proc/self/status | tr -d '\\t' | tr ':' '='"],
                         workspace.path, limits=small_limits(), path_env=VENV_PATH, isolation=level)
    assert res.status == "ok", res.stderr
    values = _parse(res.stdout)
    sets = ("CapInh", "CapPrm", "CapEff", "CapAmb") + (("CapBnd",) if os.geteuid() == 0 else ())
    for key in sets:
        assert int(values[key], 16) == 0, (level, key, values)
