"""Supervising one started run: its output, timeout, output cap, cancel, and its strays."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Protocol

from sandbox.capture import CappedBuffer
from sandbox.limits import Limits
from sandbox.procs import find_run_processes, is_alive, kill_run, signal_run
from sandbox.teardown import Stuck, TeardownWatch


class RunProcess(Protocol):
    """A started run as the supervisor sees it: a cold start's ``subprocess.Popen`` or a warm start's
    ``sandbox.warm.server.WarmProcess`` (which also has ``release()``, called once the command ends)."""

    @property
    def pid(self) -> int: ...
    @property
    def returncode(self) -> int | None: ...
    @property
    def stdout(self) -> IO[bytes] | None: ...
    @property
    def stderr(self) -> IO[bytes] | None: ...
    def poll(self) -> int | None: ...
    def wait(self, timeout: float | None = None) -> int: ...


# returncode, stdout, stderr, timed out, limit hit, strays killed
Supervised = tuple[int, CappedBuffer, CappedBuffer, bool, str | None, int]
TEARDOWN_EVERY_S = 0.5  # how often ``TeardownWatch.stalled`` is asked

TERM_GRACE_S = 1.0  # SIGTERM, then SIGKILL after this long
DRAIN_AFTER_EXIT_S = 2.0
WATCH_EVERY_S = 0.25  # how often ``watch`` (the kernel's limit counters) is asked


@dataclass
class RunProcs:
    """How one run's processes are found and signalled: its process group, its private uid or
    environment marker, and for a warm start the command's own pid (it has its own session)."""

    pgid: int
    uid: int | None
    marker: str | None
    command_pid: int | None = None
    sandbox_pids: frozenset[int] = frozenset()  # bubblewrap's and a warm placeholder's: not strays

    def _signal_command(self, proc: RunProcess, sig: int) -> None:
        if self.command_pid is not None and proc.returncode is None:
            try:
                os.kill(self.command_pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def signal(self, proc: RunProcess, sig: int) -> None:
        self._signal_command(proc, sig)
        signal_run(self.pgid, self.uid, self.marker, sig)

    def kill(self, proc: RunProcess) -> int:
        self._signal_command(proc, signal.SIGKILL)
        return kill_run(self.pgid, self.uid, self.marker)

    def live(self) -> list[int]:
        """The run's processes (the sandbox's own left out), as the host numbers them."""
        return [p for p in find_run_processes(self.uid, self.marker) if p not in self.sandbox_pids]

    def strays(self) -> list[int]:
        """Live processes of the run besides its command and the sandbox's own (zombies are dead)."""
        return [p for p in find_run_processes(self.uid, self.marker)
                if p not in self.sandbox_pids and is_alive(p)]


def supervise(proc: RunProcess, procs: RunProcs, limits: Limits, start: float, cancel: threading.Event | None,
              watch: Callable[[], str | None] | None = None, teardown: TeardownWatch | None = None,
              stuck: list[Stuck] | None = None) -> Supervised:
    """Collect the run's output until it ends, enforcing the timeout, the output cap, ``cancel``
    and ``watch`` (asked every ``WATCH_EVERY_S``: a limit named there ends the run like the output
    cap does); returns (returncode, stdout, stderr, timed out, limit hit, strays killed).

    ``teardown``: a run stalled in its teardown (``sandbox.teardown``) has its stacks dumped (the
    processes still alive are appended to ``stuck``) and is ended with ``limit_hit="teardown_hang"``."""
    out, err = CappedBuffer(limits.output_bytes), CappedBuffer(limits.output_bytes)
    sel = selectors.DefaultSelector()
    assert proc.stdout is not None and proc.stderr is not None
    for stream, buf in ((proc.stdout, out), (proc.stderr, err)):
        os.set_blocking(stream.fileno(), False)
        sel.register(stream, selectors.EVENT_READ, buf)
    deadline = start + limits.timeout_s
    timed_out = False
    limit_hit: str | None = None
    watched_at = 0.0
    teardown_at = 0.0
    last_output_at = start
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
        if watch is not None and limit_hit is None and exited_at is None and now >= watched_at + WATCH_EVERY_S:
            watched_at = now
            limit_hit = watch()  # e.g. the kernel OOM-killed a process at the run's memory cap: end the run
        if teardown is not None and limit_hit is None and exited_at is None and now >= teardown_at + TEARDOWN_EVERY_S:
            teardown_at = now
            live = procs.live()
            if teardown.stalled(live, now, last_output_at):
                found = teardown.dump(live)
                if stuck is not None:
                    stuck.extend(found)
                limit_hit = "teardown_hang"
        if term_sent_at is None and (now >= deadline or limit_hit is not None) and exited_at is None:
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
                chunk = os.read(key.fd, 1 << 16)
            except BlockingIOError:
                continue
            if not chunk:
                sel.unregister(key.fileobj)
                open_streams -= 1
                continue
            key.data.feed(chunk)
            last_output_at = time.monotonic()
            kill_at = limits.output_kill_bytes
            if kill_at is not None and out.total + err.total > kill_at and limit_hit is None:
                limit_hit = "output"
    sel.close()
    try:
        rc = proc.wait(timeout=TERM_GRACE_S * 5)
    except subprocess.TimeoutExpired:
        procs.kill(proc)
        rc = proc.wait()
    return rc, out, err, timed_out, limit_hit, strays
