"""The host side of warm starts: the ``WarmServer`` (one pre-imported interpreter, forked per
run) and ``start_warm``, which starts the run's sandbox around a placeholder and forks the command
into it (``WarmProcess``: the command seen as a ``subprocess.Popen``). See ``sandbox.warm``."""

from __future__ import annotations

import json
import logging
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from sandbox.procs import is_alive

logger = logging.getLogger(__name__)

READY_TIMEOUT_S = 120.0  # importing torch on a loaded 2-core machine can take tens of seconds
PLACEHOLDER = ["/bin/sh", "-c", "read _ferry_done"]  # exits when Ferry writes a line or closes stdin
START_TIMEOUT_S = 20.0


def static_key(env: dict[str, str], dynamic_keys: frozenset[str]) -> tuple[tuple[str, str], ...]:
    """What of ``env`` an interpreter reads as it starts: everything but the per-run keys. Runs
    whose keys are equal can fork from one server."""
    return tuple(sorted((k, v) for k, v in env.items() if k not in dynamic_keys))


class WarmUnavailable(RuntimeError):
    """The warm path cannot take this run; the caller starts it cold."""


class WarmServer:
    """One pre-imported interpreter, forked per run. Thread-safe; ``close()`` or Ferry's exit ends it."""

    def __init__(self, env: dict[str, str], preload: list[str], *, after_fork: str | None = None,
                 dynamic_keys: frozenset[str] = frozenset(), python: str | None = None):
        from sandbox.isolation import ferry_root
        from sandbox.userenv import host_env_problem

        # The server runs on the host, as Ferry's user (root in our containers), before any sandbox: nothing
        # in its environment may change how the loader, the C library or a shell starts it. The user's own
        # variables never come here (tools.runner.warm: such runs start cold).
        problem = host_env_problem(env)
        if problem is not None:
            raise ValueError(f"warm server: {problem}")
        self.env = dict(env)
        self.preload = list(preload)
        self.after_fork = after_fork
        self.dynamic_keys = frozenset(dynamic_keys)
        self.python = python or sys.executable
        self._lock = threading.Lock()
        self._ready: dict[str, Any] | None = None
        self._failed: str | None = None
        self._closed = False
        self._started_at = time.monotonic()
        # The server's own stdout/stderr (import warnings, a failed preload): an unnamed file, so
        # nothing is left behind however Ferry ends. Open as long as the server is (close()).
        self._log = tempfile.TemporaryFile(prefix="ferry-warm-", suffix=".log")  # noqa: SIM115
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        root = str(ferry_root())
        boot = ("import sys; r = sys.argv[3]; sys.path.insert(0, r); from sandbox.warm import serve as w; "
                "sys.path.remove(r); sys.exit(w.main(sys.argv[1:3]))")
        self._proc = subprocess.Popen(
            [self.python, "-c", boot, str(theirs.fileno()), ",".join(self.preload), root],
            pass_fds=[theirs.fileno()], env=self.env, cwd="/", stdin=subprocess.DEVNULL,
            stdout=self._log, stderr=self._log, start_new_session=True,
        )
        theirs.close()
        self._ctl = ours
        logger.debug("warm server %d started (preload %s)", self._proc.pid, ",".join(self.preload))

    # -- lifecycle -----------------------------------------------------------------------------
    def wait_ready(self, timeout: float | None = None, cancel: threading.Event | None = None) -> bool:
        """Wait until the server has imported its modules; False when it failed, was closed, is
        not ready within ``timeout`` s, or ``cancel`` was set meanwhile (in those last two cases
        the server stays usable for later runs). A server not ready ``READY_TIMEOUT_S`` after it
        started has failed for good."""
        deadline = min(self._started_at + READY_TIMEOUT_S,
                       time.monotonic() + (READY_TIMEOUT_S if timeout is None else timeout))
        while not self._lock.acquire(timeout=0.05):  # another run is waiting: wait with it
            if (cancel is not None and cancel.is_set()) or self._closed:
                return False
        try:
            if self._ready is not None or self._failed is not None:
                return self._ready is not None and self.alive()
            while True:  # in slices: a cancel or a close() must not wait for torch's import
                if cancel is not None and cancel.is_set():
                    return False
                if self._closed:
                    self._failed = "closed"
                    return False
                left = deadline - time.monotonic()
                if left <= 0:
                    if time.monotonic() >= self._started_at + READY_TIMEOUT_S:
                        self._failed = f"not ready {READY_TIMEOUT_S:.0f}s after it started"
                    return False
                readable, _, _ = select.select([self._ctl], [], [], min(0.1, left))
                if readable:
                    break
            try:
                msg = json.loads(self._ctl.recv(1 << 16) or b"{}")
            except (OSError, ValueError) as exc:
                msg = {"error": str(exc)}
            if not msg.get("ready"):
                self._failed = msg.get("error") or f"exited early: {self.log_tail()}"
                logger.warning("warm server failed: %s", self._failed)
                return False
            self._ready = msg
            logger.info("warm server ready (pid %s, %s modules)", msg.get("pid"), msg.get("modules"))
            return self.alive()
        finally:
            self._lock.release()

    def alive(self) -> bool:
        return self._proc.poll() is None

    def busy(self) -> bool:
        """True while a run forked from this server may be in flight (the server has a child):
        closing the server now would kill that run."""
        # a waiter not yet reaped is a zombie: not alive
        return self.alive() and any(is_alive(p) for p in _descendants(self._proc.pid))

    @property
    def failure(self) -> str | None:
        return self._failed

    def log_tail(self, chars: int = 2000) -> str:
        try:
            fd = self._log.fileno()  # shared with the server (its offset too): pread moves nothing
            size = os.fstat(fd).st_size
            start = max(0, size - 4 * chars)
            return os.pread(fd, size - start, start).decode(errors="replace")[-chars:]
        except OSError:
            return ""

    def close(self) -> None:
        """End the server now (it holds nothing worth a graceful shutdown; tearing torch down
        would only make Ferry's exit wait). Runs forked from it end with it."""
        self._closed = True  # a run waiting for readiness gives up now (and starts cold)
        with self._lock:  # not while a run is waiting on the socket or sending its request
            try:
                self._ctl.close()
            except OSError:
                pass
        self._proc.kill()
        self._proc.wait()
        self._log.close()

    # -- runs ----------------------------------------------------------------------------------
    def accepts(self, env: dict[str, str]) -> bool:
        """True when ``env`` differs from the server's only in per-run keys (the interpreter
        read everything else when it started)."""
        return static_key(env, self.dynamic_keys) == static_key(self.env, self.dynamic_keys)

    def spawn(self, request: dict[str, Any], out_w: int, err_w: int) -> socket.socket:
        """Ask for a fork into the run described by ``request``; returns the run's socket."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            with self._lock:
                socket.send_fds(self._ctl, [json.dumps(request).encode()], [theirs.fileno(), out_w, err_w])
        except OSError as exc:
            ours.close()
            raise WarmUnavailable(f"warm server unreachable: {exc}") from exc
        finally:
            theirs.close()
        return ours


def _descendants(pid: int) -> list[int]:
    out: list[int] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                kids = Path(f"/proc/{p}/task/{task}/children").read_text().split()
                out += [int(k) for k in kids]
                todo += [int(k) for k in kids]
        except OSError:
            continue
    return out


def placeholder_pid(root: int, timeout: float = START_TIMEOUT_S) -> tuple[int, set[int]]:
    """The pid (in our namespace) of the placeholder shell bubblewrap started under ``root``,
    and the pids of the sandbox's own processes (bubblewrap's, the placeholder's)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        family = _descendants(root)
        for pid in family:
            try:
                if Path(f"/proc/{pid}/comm").read_text().strip() == "sh":
                    return pid, {root, *family}
            except OSError:
                continue
        if not Path(f"/proc/{root}").exists():
            break
        time.sleep(0.005)
    raise WarmUnavailable("the sandbox's placeholder did not start")


class WarmProcess:
    """The forked command seen through ``subprocess.Popen``'s interface (``poll``/``wait``/
    ``returncode``/``stdout``/``stderr``/``pid``), so the sandbox supervises it like any run.
    ``pid`` is the sandbox's (its process group is the one signalled); ``command_pid`` the
    command's own; ``sandbox_pids`` bubblewrap's and the placeholder's, which are not strays.
    The sandbox ends at ``release()`` (the supervisor first counts what the command left running)
    or at ``wait()``."""

    def __init__(self, placeholder: subprocess.Popen[bytes], conn: socket.socket, release_fd: int, stdout: IO[bytes],
                 stderr: IO[bytes], command_pid: int, sandbox_pids: set[int]) -> None:
        self.placeholder = placeholder
        self.sandbox_pids = sandbox_pids
        self.pid = placeholder.pid
        self.conn = conn
        self._release_fd: int | None = release_fd
        self.stdout = stdout
        self.stderr = stderr
        self.command_pid = command_pid
        self.returncode: int | None = None
        self._exit: int | None = None

    def _pump(self, timeout: float = 0.0) -> None:
        while self._exit is None:
            readable, _, _ = select.select([self.conn], [], [], timeout)
            if not readable:
                return
            data = self.conn.recv(1 << 16)
            if not data:
                # The waiter ended without reporting (killed, or its server was): the command
                # died with it (its parent-death signal); the sandbox must not wait for a timeout.
                self._exit = -signal.SIGKILL
                return
            msg = json.loads(data)
            if "exit" in msg:
                self._exit = int(msg["exit"])

    def release(self) -> None:
        """Let the placeholder exit (the sandbox then ends; what the command left behind dies)."""
        if self._release_fd is not None:
            try:
                os.write(self._release_fd, b"done\n")
            except OSError:
                pass
            os.close(self._release_fd)
            self._release_fd = None

    def poll(self) -> int | None:
        if self.returncode is not None:
            return self.returncode
        self._pump()
        if self._exit is not None:
            self.returncode = self._exit
        elif self.placeholder.poll() is not None:  # the sandbox was killed: the command died with it
            self._pump(timeout=1.0)
            self.release()
            self.returncode = self._exit if self._exit is not None else self.placeholder.returncode
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired("warm run", timeout or 0)
            self._pump(timeout=0.05)
        self.release()
        remaining = None if deadline is None else max(0.1, deadline - time.monotonic())
        self.placeholder.wait(timeout=remaining)
        self.conn.close()
        assert self.returncode is not None
        return self.returncode


def start_warm(server: WarmServer, request: dict[str, Any], argv: list[str], *, cwd: str, env: dict[str, str],
               preexec_fn: Callable[[], object] | None = None, cancel: threading.Event | None = None,
               ready_timeout: float | None = None, pass_fds: tuple[int, ...] = ()) -> WarmProcess:
    """Start the sandbox (``argv`` = its prefix + the placeholder) and fork the command into it.

    Raises ``WarmUnavailable`` (nothing left running) when the command could not be started warm:
    the server is not ready within ``ready_timeout`` s (or has failed), or ``cancel`` was set while
    waiting for it."""
    if not server.wait_ready(timeout=ready_timeout, cancel=cancel):
        if cancel is not None and cancel.is_set():
            raise WarmUnavailable("cancelled while waiting for the warm server")
        raise WarmUnavailable(f"warm server not available: {server.failure or f'not ready within {ready_timeout}s'}")
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    in_r, in_w = os.pipe()
    proc = None
    conn = None
    try:
        proc = subprocess.Popen(argv, stdin=in_r, stdout=out_w, stderr=err_w, cwd=cwd, env=env,
                                start_new_session=True, preexec_fn=preexec_fn, close_fds=True, pass_fds=pass_fds)
        ns_pid, sandbox_pids = placeholder_pid(proc.pid)
        request = {**request, "ns_pid": ns_pid}
        conn = server.spawn(request, out_w, err_w)
        started: int | None = None
        running = False
        deadline = time.monotonic() + START_TIMEOUT_S
        while started is None or not running:
            left = deadline - time.monotonic()
            readable, _, _ = select.select([conn], [], [], max(0.0, left))
            if not readable:
                raise WarmUnavailable("the warm command did not start in time")
            data = conn.recv(1 << 16)
            if not data:
                raise WarmUnavailable("the warm server closed the run before it started")
            msg = json.loads(data)
            if "setup_error" in msg:
                raise WarmUnavailable(msg["setup_error"])
            if started is None and "started" in msg:  # the waiter's; nothing else may name the command
                started = int(msg["started"])
            running = running or bool(msg.get("running"))
    except BaseException:
        os.close(in_w)
        for fd in (out_r, err_r):
            os.close(fd)
        if conn is not None:
            conn.close()
        if proc is not None:
            proc.kill()
            proc.wait()
        raise
    finally:
        for fd in (in_r, out_w, err_w):
            os.close(fd)
    assert started is not None and proc is not None
    return WarmProcess(proc, conn, in_w, os.fdopen(out_r, "rb", buffering=0), os.fdopen(err_r, "rb", buffering=0),
                       started, sandbox_pids)
