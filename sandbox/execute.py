"""Run one command in the sandbox: isolation prefix, rlimits, timeout, capped output."""

from __future__ import annotations

import functools
import logging
import os
import random
import selectors
import signal
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from sandbox.capture import CappedBuffer
from sandbox.env import scrubbed_env
from sandbox.isolation import IsolationInfo, SandboxUnavailable, bwrap_prefix, choose, drop_uid_prefix, unshare_prefix
from sandbox.limits import Limits, apply_rlimits, prlimit_prefix, rlimit_pairs, soft_hard
from sandbox.procs import find_run_processes, is_alive, kill_run, signal_run
from sandbox.warm import PLACEHOLDER, WarmProcess, WarmServer, WarmUnavailable, start_warm
from sandbox.warm_cmd import PythonSpec

logger = logging.getLogger(__name__)

TERM_GRACE_S = 1.0  # SIGTERM, then SIGKILL after this long
DRAIN_AFTER_EXIT_S = 2.0
RUN_MARKER_ENV = "FERRY_SANDBOX_RUN"
UID_RANGE = (200_000, 900_000)


@dataclass
class SandboxResult:
    argv: list[str]
    exit_code: int | None  # the program's exit status (None when killed by a signal)
    signal: int | None  # signal that ended the program, if any
    timed_out: bool
    duration_s: float
    stdout: str
    stderr: str
    stdout_bytes: int
    stderr_bytes: int
    stdout_dropped: int
    stderr_dropped: int
    isolation: str
    isolation_reasons: list[str] = field(default_factory=list)
    limit_hit: str | None = None  # timeout | cpu_time | file_size | output | killed | cancelled
    strays_killed: int = 0  # processes still alive after the main one ended (daemons)
    uid: int | None = None
    warm: bool = False  # started in a fork of a pre-imported interpreter (``sandbox.warm``)
    warm_fallback: str | None = None  # why a warm start that was asked for started cold

    @property
    def status(self) -> str:
        if self.timed_out:
            return "timeout"
        if self.limit_hit == "cancelled":
            return "cancelled"
        if self.signal is not None or self.limit_hit is not None:
            return "killed"
        return "ok" if self.exit_code == 0 else "failed"


def _pick_uid() -> int:
    # 700k candidates: two concurrent runs sharing one is a ~1e-6 event, and would only
    # merge their process counts.
    return random.randrange(*UID_RANGE)


def _limit_from_signal(sig: int | None) -> str | None:
    if sig == signal.SIGXCPU:
        return "cpu_time"
    if sig == signal.SIGXFSZ:
        return "file_size"
    if sig == signal.SIGKILL:
        return "killed"
    return None


@dataclass
class _RunProcs:
    """How one run's processes are found and signalled: its process group, its private uid or
    environment marker, and for a warm start the command's own pid (it has its own session)."""

    pgid: int
    uid: int | None
    marker: str | None
    command_pid: int | None = None
    sandbox_pids: frozenset[int] = frozenset()  # bubblewrap's and a warm placeholder's: not strays

    def _signal_command(self, proc, sig: int) -> None:
        if self.command_pid is not None and proc.returncode is None:
            try:
                os.kill(self.command_pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def signal(self, proc, sig: int) -> None:
        self._signal_command(proc, sig)
        signal_run(self.pgid, self.uid, self.marker, sig)

    def kill(self, proc) -> int:
        self._signal_command(proc, signal.SIGKILL)
        return kill_run(self.pgid, self.uid, self.marker)

    def strays(self) -> list[int]:
        """Live processes of the run besides its command and the sandbox's own (zombies are dead)."""
        return [p for p in find_run_processes(self.uid, self.marker)
                if p not in self.sandbox_pids and is_alive(p)]


def _supervise(proc, procs: _RunProcs, limits: Limits, start: float, cancel: threading.Event | None
               ) -> tuple[int, CappedBuffer, CappedBuffer, bool, str | None, int]:
    """Collect the run's output until it ends, enforcing the timeout, the output cap and ``cancel``;
    returns (returncode, stdout, stderr, timed out, limit hit, strays killed)."""
    out, err = CappedBuffer(limits.output_bytes), CappedBuffer(limits.output_bytes)
    sel = selectors.DefaultSelector()
    assert proc.stdout is not None and proc.stderr is not None
    for stream, buf in ((proc.stdout, out), (proc.stderr, err)):
        os.set_blocking(stream.fileno(), False)
        sel.register(stream, selectors.EVENT_READ, buf)
    deadline = start + limits.timeout_s
    timed_out = False
    limit_hit: str | None = None
    term_sent_at: float | None = None
    exited_at: float | None = None
    strays = 0
    open_streams = 2
    while open_streams:
        now = time.monotonic()
        if proc.poll() is not None and exited_at is None:
            exited_at = now
            # The main process is gone: anything of the run still alive is a stray (daemon).
            strays = len(procs.strays())
            if strays:
                kill_run(None, procs.uid, procs.marker)
            release = getattr(proc, "release", None)  # a warm start's sandbox ends now
            if release is not None:
                release()
        if exited_at is not None and now - exited_at > DRAIN_AFTER_EXIT_S:
            break
        if cancel is not None and cancel.is_set() and limit_hit is None and exited_at is None:
            limit_hit = "cancelled"
        if term_sent_at is None and (now >= deadline or limit_hit in ("output", "cancelled")) and exited_at is None:
            timed_out = limit_hit is None
            procs.signal(proc, signal.SIGTERM)
            term_sent_at = now
        if term_sent_at is not None and now - term_sent_at >= TERM_GRACE_S and exited_at is None:
            procs.kill(proc)
        wait = 0.2 if term_sent_at is None else 0.05
        if term_sent_at is None:
            wait = max(0.0, min(wait, deadline - now))
        for key, _ in sel.select(timeout=wait):
            try:
                chunk = os.read(key.fileobj.fileno(), 1 << 16)
            except BlockingIOError:
                continue
            if not chunk:
                sel.unregister(key.fileobj)
                open_streams -= 1
                continue
            key.data.feed(chunk)
            if limits.output_kill_bytes is not None and out.total + err.total > limits.output_kill_bytes and limit_hit is None:
                limit_hit = "output"
    sel.close()
    try:
        rc = proc.wait(timeout=TERM_GRACE_S * 5)
    except subprocess.TimeoutExpired:
        procs.kill(proc)
        rc = proc.wait()
    return rc, out, err, timed_out, limit_hit, strays


@dataclass(frozen=True)
class WarmStart:
    """Run the command in a fork of ``server`` (see ``sandbox.warm``) as the invocation ``spec``."""

    server: WarmServer
    spec: PythonSpec


def _start_cold(argv: list[str], workspace: Path, child_env: dict[str, str], preexec) -> subprocess.Popen:
    try:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=str(workspace),
            env=child_env,
            start_new_session=True,
            preexec_fn=preexec,
            close_fds=True,
        )
    except OSError as exc:
        raise SandboxUnavailable(f"cannot start {argv[0]}: {exc}") from exc


def _start_warm(warm: WarmStart, command: list[str], sandbox_argv: list[str], workspace: Path,
                child_env: dict[str, str], preexec, pairs, uid: int | None,
                cancel: threading.Event | None, ready_timeout: float) -> tuple[WarmProcess | None, str | None]:
    """The started warm run, or None and why it starts cold (not waiting for a server still
    importing longer than ``ready_timeout``)."""
    if not warm.server.accepts(child_env):
        why = "the run's environment differs from the warm server's"
        logger.info("warm start skipped: %s", why)
        return None, why
    run_env = dict(child_env)
    if command and os.path.basename(command[0]) in ("sh", "bash", "dash"):
        run_env["PWD"] = str(workspace)  # what the shell a cold start goes through exports
    request = {"cwd": str(workspace), "env": run_env, "uid": uid, "spec": warm.spec.to_dict(),
               "rlimits": [[res, *soft_hard(res, value)] for res, value in pairs],
               "after_fork": warm.server.after_fork}
    try:
        return start_warm(warm.server, request, sandbox_argv + PLACEHOLDER, cwd=str(workspace), env=child_env,
                          cancel=cancel, ready_timeout=ready_timeout, preexec_fn=preexec), None
    except (WarmUnavailable, OSError) as exc:
        logger.info("warm start unavailable, starting cold: %s", exc)
        return None, str(exc) or type(exc).__name__


def run_in_sandbox(
    command: list[str],
    workspace: Path,
    *,
    limits: Limits | None = None,
    env: dict[str, str] | None = None,
    writable: list[Path] | None = None,
    readable: list[Path] | None = None,
    isolation: str | None = None,
    owner_uid: int | None = None,
    path_env: str | None = None,
    cancel: threading.Event | None = None,
    warm: WarmStart | None = None,
) -> SandboxResult:
    """Run ``command`` with ``workspace`` as its only writable tree (plus ``writable``).

    ``env`` holds the variables the caller wants set (scrubbed again: secrets never pass).
    ``cancel``: when set (from another thread), the run is stopped like a timeout (SIGTERM, then
    SIGKILL) and reported with status ``cancelled``.
    ``owner_uid``: when Ferry is root, the uid the workspace was chowned to (one is picked
    and the workspace/writable paths are chowned when not given).
    ``warm``: start the command in a fork of a pre-imported interpreter when it can be (bubblewrap
    only; same sandbox, limits and result), otherwise start it cold.
    """
    if not command:
        raise ValueError("empty command")
    limits = limits or Limits()
    info: IsolationInfo = choose(isolation)
    workspace = Path(workspace).resolve()
    writable = [Path(p).resolve() for p in (writable or [])]
    readable = [Path(p).resolve() for p in (readable or [])]
    uid = None
    if info.drops_uid:
        uid = owner_uid if owner_uid is not None else _pick_uid()
        if owner_uid is None:
            from sandbox.workspace import _chown_tree

            for p in [workspace, *writable]:
                _chown_tree(p, uid)
    # Strays are found by the run's private uid; without one (Ferry not root) by an environment
    # marker. Under bwrap the pid namespace already takes every process down with the run.
    marker = uuid.uuid4().hex
    extra = dict(env or {})
    extra[RUN_MARKER_ENV] = marker
    if uid is not None:
        marker = None
    child_env = scrubbed_env(dict(os.environ), extra, path=path_env or "/usr/local/bin:/usr/bin:/bin")

    if info.level == "bwrap":
        prefix = bwrap_prefix(workspace=workspace, writable=writable, readable=readable, uid=uid, tmp_bytes=limits.tmp_bytes)
    elif info.level == "unshare":
        prefix = unshare_prefix() + (drop_uid_prefix(uid) if uid is not None else [])
    else:
        prefix = drop_uid_prefix(uid) if uid is not None else []
    pairs = rlimit_pairs(limits)
    limiter = prlimit_prefix(pairs)
    preexec = None if limiter else functools.partial(apply_rlimits, pairs)  # the limits without prlimit
    sandbox_argv = (limiter or []) + prefix
    argv = sandbox_argv + list(command)
    logger.debug("sandbox argv: %s", argv)

    t0 = time.monotonic()
    proc = None
    warm_fallback: str | None = None
    if warm is not None and info.level == "bwrap":
        # Waiting for a server still importing is bounded by the run's own timeout, and the run's
        # clock starts when its command does (warm or, after the wait, cold).
        proc, warm_fallback = _start_warm(warm, list(command), sandbox_argv, workspace, child_env, preexec, pairs,
                                          uid, cancel, limits.timeout_s)
    elif warm is not None:
        warm_fallback = f"warm starts need bubblewrap; isolation in force is {info.level}"
    warm_started = proc is not None
    if proc is None and cancel is not None and cancel.is_set():
        # Cancelled before anything started (e.g. while waiting for a warm server): start nothing.
        return SandboxResult(argv=argv, exit_code=None, signal=None, timed_out=False,
                             duration_s=time.monotonic() - t0, stdout="", stderr="", stdout_bytes=0,
                             stderr_bytes=0, stdout_dropped=0, stderr_dropped=0, isolation=info.level,
                             isolation_reasons=list(info.reasons), limit_hit="cancelled", uid=uid,
                             warm_fallback=warm_fallback)
    start = time.monotonic()
    if proc is None:
        proc = _start_cold(argv, workspace, child_env, preexec)
    else:
        argv = sandbox_argv + ["<warm>", *command]
    procs = _RunProcs(proc.pid, uid, marker, getattr(proc, "command_pid", None),
                      frozenset(getattr(proc, "sandbox_pids", ())))
    try:
        rc, out, err, timed_out, limit_hit, strays = _supervise(proc, procs, limits, start, cancel)
    except BaseException:  # Ctrl-C / SystemExit in Ferry: the run must not outlive it
        procs.kill(proc)
        try:
            proc.wait(timeout=TERM_GRACE_S * 5)
        except subprocess.TimeoutExpired:
            pass
        raise
    leftover = procs.strays()
    if leftover:  # counted as processes, not as the signals it takes to end them
        kill_run(proc.pid, uid, marker)
        strays += len(leftover)
    duration = time.monotonic() - start
    for stream in (proc.stdout, proc.stderr):
        stream.close()

    sig: int | None = None
    exit_code: int | None = rc
    if rc < 0:
        sig, exit_code = -rc, None
    elif info.level == "bwrap" and 128 < rc < 128 + 32 and not timed_out:
        # bubblewrap reports a child killed by signal N as exit status 128 + N.
        sig, exit_code = rc - 128, None
    if timed_out:
        limit_hit = "timeout"
    elif limit_hit is None:
        limit_hit = _limit_from_signal(sig)
    return SandboxResult(
        argv=argv,
        exit_code=exit_code,
        signal=sig,
        timed_out=timed_out,
        duration_s=duration,
        stdout=out.text(),
        stderr=err.text(),
        stdout_bytes=out.total,
        stderr_bytes=err.total,
        stdout_dropped=out.dropped,
        stderr_dropped=err.dropped,
        isolation=info.level,
        isolation_reasons=list(info.reasons),
        limit_hit=limit_hit,
        strays_killed=strays,
        uid=uid,
        warm=warm_started,
        warm_fallback=warm_fallback,
    )
