"""Teardown hangs: a run whose work is over but one of its processes never exits.

The run's Python processes (Ferry's bootstrap in each, ``tools/runner/child``) register a stack
dump on ``STACKS_SIGNAL`` with ``faulthandler`` into ``STACKS_DIR/stack-<pid>-<role>.txt`` (pid as the
process sees it, role ``rank<N>``, ``agent`` or ``proc``) and create ``exiting-<pid>`` when the
interpreter starts to shut down (its main code is done). The supervisor asks ``TeardownWatch.stalled``
every half second; a run is stalled in its teardown when, for ``grace_s`` seconds, it printed
nothing, its processes together used (almost) no CPU, and either

* a rank of a distributed job (torchrun worker, ``mp.spawn`` worker) has exited while another
  process of the job (a rank or torchrun's agent) is still alive, or
* a process is still alive ``grace_s`` after it began to shut down.

A busy process (a long final save, an evaluation only rank 0 runs) uses CPU and is never taken for
a hung one. ``dump`` then sends the signal to the still-alive registered processes and waits a
moment for their stacks; the supervisor ends the run (``limit_hit="teardown_hang"``).

Everything in ``STACKS_DIR`` is the run's: names are matched strictly, entries are looked at without
following links, and nothing is read here (the runner reads the stacks after collecting them
through ``sandbox.artifacts``). A forged entry can at most end the run early as hung, which the run
could do anyway.
"""

from __future__ import annotations

import os
import re
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

STACKS_DIR_ENV = "FERRY_STACKS_DIR"
STACKS_SIGNAL_ENV = "FERRY_STACKS_SIGNAL"
# a real-time signal: no Python program or library uses it, and only processes that registered a
# handler for it (SigCgt in /proc/PID/status) are ever sent it
STACKS_SIGNAL = int(signal.SIGRTMAX) - 3
GRACE_S = 5.0  # quiet and idle this long after the first exit of a rank (or the start of a shutdown)
IDLE_CPU_SHARE = 0.05  # "idle": the run's processes used less than this share of one CPU meanwhile
DUMP_WAIT_S = 2.0  # how long the stacks may take to be written
MAX_ENTRIES = 512  # entries of the stacks dir looked at

_STACK = re.compile(r"stack-(\d{1,9})-(rank\d{1,6}|agent|proc)\.txt")
_EXITING = re.compile(r"exiting-(\d{1,9})")
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass
class Stuck:
    """A process that was still alive when the run was found stalled."""

    pid: int  # as the run saw it (its pid namespace)
    role: str  # rank<N> | agent | proc
    shutting_down: bool  # it had begun interpreter shutdown (its main code had returned)
    stack_file: str | None  # the name of its stack dump in the stacks dir, when one was written


@dataclass
class _Entries:
    roles: dict[int, str] = field(default_factory=dict)  # registered pid -> role
    exiting: set[int] = field(default_factory=set)
    sizes: dict[int, int] = field(default_factory=dict)  # pid -> size of its stack file


def _entries(stacks_dir: Path) -> _Entries:
    found = _Entries()
    try:
        it = os.scandir(stacks_dir)
    except OSError:
        return found
    with it:
        for n, entry in enumerate(it):
            if n >= MAX_ENTRIES:
                break
            try:
                if not entry.is_file(follow_symlinks=False):
                    continue
                m = _STACK.fullmatch(entry.name)
                if m is not None:
                    pid = int(m.group(1))
                    found.roles[pid] = m.group(2)
                    found.sizes[pid] = entry.stat(follow_symlinks=False).st_size
                    continue
                m = _EXITING.fullmatch(entry.name)
                if m is not None:
                    found.exiting.add(int(m.group(1)))
            except OSError:
                continue
    return found


def _status_fields(pid: int) -> dict[str, str]:
    out: dict[str, str] = {}
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key in ("NSpid", "SigCgt", "State"):
                    out[key] = value.strip()
    except OSError:
        pass
    return out


def _inner_pid(fields: dict[str, str], pid: int) -> int:
    """The pid the process has in its own (innermost) pid namespace: what it named its files by."""
    parts = fields.get("NSpid", "").split()
    try:
        return int(parts[-1]) if parts else pid
    except ValueError:
        return pid


def _catches(fields: dict[str, str], sig: int) -> bool:
    try:
        return bool(int(fields.get("SigCgt", "0"), 16) >> (sig - 1) & 1)
    except ValueError:
        return False


def _cpu_ticks(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            rest = fh.read().rsplit(b")", 1)[1].split()
        return int(rest[11]) + int(rest[12])  # utime, stime (fields 14 and 15)
    except (OSError, IndexError, ValueError):
        return None


@dataclass
class TeardownWatch:
    """Watches one run for a teardown hang (see the module's docstring). ``stacks_dir``: where the
    run's processes write (as the host sees it)."""

    stacks_dir: Path
    grace_s: float = GRACE_S
    sig: int = STACKS_SIGNAL
    _seen: dict[int, str] = field(default_factory=dict)  # inner pid -> role, every registered process seen
    _exited_rank_at: float | None = None
    _exiting_since: dict[int, float] = field(default_factory=dict)
    _ticks: dict[int, int] = field(default_factory=dict)  # host pid -> cpu ticks at the window's start
    _window_at: float | None = None
    _window_cpu: float = 0.0
    _alive: dict[int, int] = field(default_factory=dict)  # inner pid -> host pid, at the last look
    _sizes: dict[int, int] = field(default_factory=dict)  # inner pid -> size of its stack file, at the last look

    def child_env(self) -> dict[str, str]:
        """The variables that make the run's processes register (the bootstrap reads them)."""
        return {STACKS_DIR_ENV: str(self.stacks_dir), STACKS_SIGNAL_ENV: str(self.sig)}

    def _look(self, pids: list[int], now: float) -> None:
        entries = _entries(self.stacks_dir)
        alive: dict[int, int] = {}
        cpu = 0
        ticks: dict[int, int] = {}
        for pid in pids:
            fields = _status_fields(pid)
            if not fields or fields.get("State", "").startswith(("Z", "X")):
                continue
            alive[_inner_pid(fields, pid)] = pid
            t = _cpu_ticks(pid)
            if t is not None:
                ticks[pid] = t
                cpu += t - self._ticks.get(pid, t if self._window_at is None else 0)
        self._ticks.update(ticks)
        self._window_cpu += cpu / _TICK
        for inner, role in entries.roles.items():
            self._seen.setdefault(inner, role)
        ranks_gone = [p for p, role in self._seen.items() if role.startswith("rank") and p not in alive]
        if ranks_gone and self._exited_rank_at is None:
            self._exited_rank_at = now
        for inner in entries.exiting:
            if inner in alive:
                self._exiting_since.setdefault(inner, now)
        self._alive = alive
        self._sizes = entries.sizes

    def _restart_window(self, now: float) -> None:
        self._window_at, self._window_cpu = now, 0.0

    def stalled(self, pids: list[int], now: float, last_output_at: float) -> bool:
        """True when the run has been stalled in its teardown for ``grace_s`` (``pids``: the run's
        live processes as the host numbers them; ``last_output_at``: when it last printed)."""
        self._look(pids, now)
        if self._window_at is None:
            self._restart_window(now)
            return False
        if self._window_cpu > IDLE_CPU_SHARE * max(now - self._window_at, 1.0) or last_output_at > self._window_at:
            self._restart_window(now)  # busy or talking: the quiet must start again
            return False
        quiet_for = now - self._window_at
        if quiet_for < self.grace_s:
            return False
        job_alive = any(self._seen.get(p, "").startswith(("rank", "agent")) for p in self._alive)
        if self._exited_rank_at is not None and job_alive and now - self._exited_rank_at >= self.grace_s:
            return True
        return any(p in self._alive and now - since >= self.grace_s for p, since in self._exiting_since.items())

    def dump(self, pids: list[int]) -> list[Stuck]:
        """Ask every live registered process for its stacks and wait (at most ``DUMP_WAIT_S``) for them."""
        self._look(pids, time.monotonic())
        ours = [p for p in sorted(self._alive) if p in self._seen or p in self._exiting_since]
        targets = {p: self._alive[p] for p in ours if _catches(_status_fields(self._alive[p]), self.sig)}
        before = dict(self._sizes)
        for host in targets.values():
            try:
                os.kill(host, self.sig)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + DUMP_WAIT_S
        last: dict[int, int] = {}
        while targets and time.monotonic() < deadline:
            time.sleep(0.1)
            sizes = _entries(self.stacks_dir).sizes
            grown = all(sizes.get(p, 0) > before.get(p, 0) for p in targets)
            if grown and all(sizes.get(p) == last.get(p) for p in targets):
                break  # every dump written and no longer growing
            last = sizes
        sizes = _entries(self.stacks_dir).sizes
        return [Stuck(pid=p, role=self._seen.get(p, "proc"), shutting_down=p in self._exiting_since,
                      stack_file=f"stack-{p}-{self._seen[p]}.txt" if sizes.get(p) and p in self._seen else None)
                for p in ours]
