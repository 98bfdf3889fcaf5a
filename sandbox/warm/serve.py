"""The warm server: one interpreter that imported the heavy modules once and forks per run.

Started by ``sandbox.warm.server.WarmServer`` with the runs' static environment, it imports the
``preload`` modules, says ``{"ready": ...}`` on its control socket, then for every request
(a JSON packet with the run's socket, stdout and stderr passed as file descriptors) forks a
process that enters that run's sandbox (``sandbox.warm.child.child_main``). It never runs user
code itself, holds no threads of its own, and exits when the control socket closes (Ferry
ended) or its parent dies.
"""

from __future__ import annotations

import array
import errno
import gc
import importlib
import json
import os
import select
import socket
import sys
import traceback

MAX_REQUEST = 1 << 20


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 1


def _receive(ctl: socket.socket, buf: bytearray) -> tuple[int, list[int]]:
    """One request into ``buf`` (no copy of it anywhere else in this process) and its descriptors."""
    size, ancdata, _, _ = ctl.recvmsg_into([buf], socket.CMSG_SPACE(3 * array.array("i").itemsize))
    fds = array.array("i")
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[:len(data) - len(data) % fds.itemsize])
    return size, list(fds)


def _wipe(buf: bytearray, size: int) -> None:
    memoryview(buf)[:size] = bytes(size)


def serve(ctl: socket.socket, preload: list[str]) -> int:
    from sandbox.warm.child import child_main

    # Not PR_SET_PDEATHSIG: it fires when the *thread* that started the server ends, and Ferry
    # starts it from whichever thread needs it first (a graph node, a background job). The owner
    # is gone when the control socket closes (its end dies with Ferry) or when we are reparented.
    owner = os.getppid()
    server_pid = os.getpid()
    try:
        for name in preload:
            importlib.import_module(name)
    except BaseException as exc:
        ctl.send(json.dumps({"error": f"preloading failed: {type(exc).__name__}: {exc}",
                             "traceback": traceback.format_exc()[-4000:]}).encode())
        return 1
    # What the preload made stays alive in every run: frozen, a run's collections (the full one at its end
    # included, ``child._finalize_main``) never walk it (about 0.2 s per full collection once torch is
    # loaded) nor write its pages (copy-on-write). The program's own objects are collected as ever.
    gc.collect()
    gc.freeze()
    sys.stdout.flush()
    sys.stderr.flush()
    ctl.send(json.dumps({"ready": True, "pid": os.getpid(), "threads": _threads(),
                         "modules": len(sys.modules)}).encode())
    # Requests (each run's environment and paths) are read into this one buffer, parsed only in the
    # fork and wiped here after it: every later run forks from this memory and must find no trace of
    # another run in it (a request parsed here would leave its strings in the freed heap).
    buf = bytearray(MAX_REQUEST)
    while True:
        try:
            readable, _, _ = select.select([ctl], [], [], 1.0)
        except InterruptedError:
            readable = []
        _reap()
        if os.getppid() != owner:
            return 0  # Ferry died while something else still holds its end of the socket
        if not readable:
            continue
        try:
            size, fds = _receive(ctl, buf)
        except OSError as exc:
            if exc.errno == errno.EINTR:
                continue
            return 0
        if not size:
            return 0  # Ferry closed the control socket
        if len(fds) != 3:
            for fd in fds:
                os.close(fd)
            _wipe(buf, size)
            continue
        run_fd, out_fd, err_fd = fds
        run_sock = socket.socket(fileno=run_fd)
        try:
            pid = os.fork()
        except OSError as exc:
            run_sock.send(json.dumps({"setup_error": f"warm server: {exc}"}).encode())
            pid = -1
        if pid == 0:
            ctl.close()
            child_main(bytes(buf[:size]), run_sock, out_fd, err_fd, server_pid)  # never returns
        _wipe(buf, size)
        run_sock.close()
        os.close(out_fd)
        os.close(err_fd)


def main(argv: list[str]) -> int:
    ctl = socket.socket(fileno=int(argv[0]))
    preload = [m for m in argv[1].split(",") if m] if len(argv) > 1 else []
    return serve(ctl, preload)
