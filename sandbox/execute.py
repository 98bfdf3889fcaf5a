"""Run one command in the sandbox: isolation prefix, rlimits, timeout, capped output."""

from __future__ import annotations

import functools
import logging
import os
import random
import re
import shutil
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sandbox import seccomp
from sandbox.cgroups import RunCgroup, open_for_run
from sandbox.env import scrubbed_env
from sandbox.isolation import (
    IsolationInfo,
    SandboxUnavailable,
    bwrap_prefix,
    choose,
    drop_caps_prefix,
    drop_uid_prefix,
    unshare_prefix,
)
from sandbox.limits import Limits, apply_rlimits, prlimit_prefix, rlimit_pairs, soft_hard
from sandbox.procs import kill_run
from sandbox.runspace import RunSpace, disk_cap_text
from sandbox.supervise import TERM_GRACE_S, RunProcs, supervise
from sandbox.teardown import Stuck, TeardownWatch
from sandbox.userenv import host_safe_env
from sandbox.warm.command import PythonSpec
from sandbox.warm.server import PLACEHOLDER, WarmProcess, WarmServer, WarmUnavailable, start_warm

logger = logging.getLogger(__name__)

RUN_MARKER_ENV = "FERRY_SANDBOX_RUN"
UID_RANGE = (200_000, 900_000)
# The whole environment of what a run starts on the host before its program (the cgroup wrapper's
# shell, prlimit, bubblewrap or unshare, setpriv, env): fixed, none of the run's variables. Those are
# set by ``env -i`` (``exec_env_prefix``) at the last exec, inside the sandbox (see run_in_sandbox).
HOST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


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
    # timeout | cpu_time | file_size | output | killed | cancelled | memory | processes | disk_quota
    limit_hit: str | None = None
    strays_killed: int = 0  # processes still alive after the main one ended (daemons)
    uid: int | None = None
    warm: bool = False  # started in a fork of a pre-imported interpreter (``sandbox.warm``)
    warm_fallback: str | None = None  # why a warm start that was asked for started cold
    disk_cap: str = ""  # what capped the run's writes (``sandbox.runspace.disk_cap_text``)
    resource_control: str = "rlimits"  # cgroup2 | cgroup1 | rlimits: whole-run memory/process limits
    resource_control_reasons: list[str] = field(default_factory=list)  # why not a stronger level
    seccomp: str = ""  # on: ... / off: why (``IsolationInfo.seccomp_text``)
    stuck: list[Stuck] = field(default_factory=list)  # limit_hit teardown_hang: the processes still alive

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


def _kernel_limit(failed: bool, cgroup_hit: str | None, disk_full: bool) -> str | None:
    """The limit the kernel's state says a failed run hit: its cgroup OOM-killed a process
    (``memory``), its space is full (``disk_quota``: ENOSPC, or SIGBUS on a /dev/shm page), a fork
    was refused at pids.max (``processes``). A run that succeeded anyway keeps no limit_hit."""
    if not failed:
        if cgroup_hit or disk_full:
            logger.info("run succeeded although it reached a limit (%s)", cgroup_hit or "disk_quota")
        return None
    if cgroup_hit == "memory":
        return "memory"
    if disk_full:
        return "disk_quota"
    return cgroup_hit


def _limit_from_signal(sig: int | None) -> str | None:
    if sig == signal.SIGXCPU:
        return "cpu_time"
    if sig == signal.SIGXFSZ:
        return "file_size"
    if sig == signal.SIGKILL:
        return "killed"
    return None


@dataclass(frozen=True)
class WarmStart:
    """Run the command in a fork of ``server`` (see ``sandbox.warm``) as the invocation ``spec``."""

    server: WarmServer
    spec: PythonSpec


def host_env(marker: str | None = None) -> dict[str, str]:
    """The environment of the processes a run starts on the host (and, under bubblewrap, of the sandbox's
    own setup before the program): a fixed PATH and locale, and the run's stray marker when it has one."""
    env = {"PATH": HOST_PATH, "LC_ALL": "C"}
    if marker is not None:
        env[RUN_MARKER_ENV] = marker
    return env


def exec_env_prefix(child_env: dict[str, str]) -> list[str]:
    """``env -i NAME=VALUE... ``: the last exec before the program, which replaces the whole environment
    with ``child_env``. It runs inside the sandbox, with the run's uid; nothing before it sees the run's
    variables. A name that is not a plain name (which ``env`` would split or read as an option) or a NUL
    byte is a ValueError."""
    exe = shutil.which("env", path="/usr/bin:/bin")
    if exe is None:
        raise SandboxUnavailable("env (coreutils) is needed to set the run's environment")
    pairs: list[str] = []
    for key, value in child_env.items():
        if not _PLAIN_NAME.fullmatch(key) or "\0" in value:
            raise ValueError(f"the run's environment holds {key[:60]!r}, which is not a plain variable name "
                             "with a value without NUL bytes")
        pairs.append(f"{key}={value}")
    return [exe, "-i", *pairs]


def shown_argv(argv: list[str], env_prefix: list[str]) -> list[str]:
    """``argv`` as results and logs show it: the variables ``env -i`` sets counted, not listed."""
    n = len(env_prefix)
    for i in range(len(argv) - n + 1):
        if argv[i:i + n] == env_prefix:
            return [*argv[:i], env_prefix[0], "-i", f"<{n - 2} variables>", *argv[i + n:]]
    return list(argv)


def _start_cold(argv: list[str], workspace: Path, marker: str | None,
                preexec: Callable[[], object] | None, seccomp_fd: int | None = None) -> subprocess.Popen[bytes]:
    pass_fds: tuple[int, ...] = ()
    if seccomp_fd is not None:  # from its start: a warm start that fell back may have read it
        os.lseek(seccomp_fd, 0, os.SEEK_SET)
        pass_fds = (seccomp_fd,)
    try:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=str(workspace),
            env=host_env(marker),
            start_new_session=True,
            preexec_fn=preexec,
            close_fds=True,
            pass_fds=pass_fds,
        )
    except OSError as exc:
        raise SandboxUnavailable(f"cannot start {argv[0]}: {exc}") from exc


def _start_warm(warm: WarmStart, command: list[str], sandbox_argv: list[str], workspace: Path,
                child_env: dict[str, str], preexec: Callable[[], object] | None, pairs: list[tuple[int, int]],
                uid: int | None, cancel: threading.Event | None, ready_timeout: float,
                cgroup: RunCgroup | None, seccomp_fd: int | None) -> tuple[WarmProcess | None, str | None]:
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
               "after_fork": warm.server.after_fork,
               # the forked command is not bubblewrap's child: it installs the same filter itself
               "seccomp": seccomp_fd is not None,
               # the forked process joins the run's cgroup(s) first, while it is still root
               "cgroup_procs": cgroup.procs_files if cgroup is not None else []}
    try:
        # The placeholder's sandbox gets the fixed host environment; the command takes ``run_env`` from
        # the request once it has joined that sandbox and given up root (sandbox.warm.child).
        return start_warm(warm.server, request, sandbox_argv + PLACEHOLDER, cwd=str(workspace),
                          env=host_env(child_env.get(RUN_MARKER_ENV)), cancel=cancel, ready_timeout=ready_timeout,
                          preexec_fn=preexec, pass_fds=(seccomp_fd,) if seccomp_fd is not None else ()), None
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
    space: RunSpace | None = None,
    cwd: str | None = None,
    teardown: TeardownWatch | None = None,
) -> SandboxResult:
    """Run ``command`` with ``workspace`` as its only writable tree (plus ``writable``).

    ``env`` holds the variables the caller wants set (scrubbed again: secrets never pass).
    ``cancel``: when set (from another thread), the run is stopped like a timeout (SIGTERM, then
    SIGKILL) and reported with status ``cancelled``.
    ``owner_uid``: when Ferry is root, the uid the workspace was chowned to (one is picked
    and the workspace/writable paths are chowned when not given).
    ``warm``: start the command in a fork of a pre-imported interpreter when it can be (bubblewrap
    only; same sandbox, limits and result), otherwise start it cold.
    ``space``: the run's capped writable space (``sandbox.runspace``), holding ``workspace``; when
    mounted, its ``tmp``/``shm`` dirs are the run's /tmp and /dev/shm under bubblewrap (at weaker
    levels TMPDIR and HOME point there) and ``limits.disk_bytes`` caps them all together. Without it
    /tmp and /dev/shm are bubblewrap's own tmpfs of ``limits.disk_bytes`` each.
    Memory and processes of the whole run are capped by a cgroup where one can be made
    (``sandbox.cgroups``; ``limits.run_memory_bytes``, ``limits.run_processes``).
    ``teardown``: end a run stalled in its teardown quickly, with its stacks (``sandbox.teardown``;
    the caller puts ``teardown.child_env()`` into ``env`` and makes its stacks dir writable).
    ``cwd``: the directory the command starts in, relative to ``workspace`` (default: its root);
    it must be a directory inside it (ValueError otherwise).
    """
    if not command:
        raise ValueError("empty command")
    limits = limits or Limits()
    info: IsolationInfo = choose(isolation)
    workspace = Path(workspace).resolve()
    start_dir = start_directory(workspace, cwd)
    writable = [Path(p).resolve() for p in (writable or [])]
    readable = [Path(p).resolve() for p in (readable or [])]
    uid: int | None = None
    if info.drops_uid:
        uid = owner_uid if owner_uid is not None else _pick_uid()
        if owner_uid is None:
            from sandbox.workspace import _chown_tree

            for p in [workspace, *writable]:
                _chown_tree(p, uid)
    # Strays are found by the run's private uid; without one (Ferry not root) by an environment
    # marker. Under bwrap the pid namespace already takes every process down with the run.
    run_marker = uuid.uuid4().hex
    extra = dict(env or {})
    extra[RUN_MARKER_ENV] = run_marker
    marker = run_marker if uid is None else None
    space_tmp = space.tmp if space is not None else None  # None: no mounted space
    # At the weaker levels /tmp is the host's: programs that honour TMPDIR/HOME write into the space.
    tmp = str(space_tmp) if space_tmp is not None and info.level != "bwrap" else "/tmp"
    child_env = scrubbed_env(dict(os.environ), extra, path=path_env or "/usr/local/bin:/usr/bin:/bin",
                             home=tmp, tmp=tmp)
    disk_cap = disk_cap_text(space, info.level, limits)

    program = seccomp.filter_program() if info.level == "bwrap" and not info.seccomp_unavailable else None
    seccomp_fd = seccomp.filter_fd(program) if program is not None else None
    try:
        return _run_with(command, workspace, start_dir, limits, info, child_env, writable, readable, uid, marker,
                         cancel, warm, space, disk_cap, seccomp_fd, teardown)
    finally:
        if seccomp_fd is not None:
            os.close(seccomp_fd)


def _run_with(command: list[str], workspace: Path, start_dir: Path, limits: Limits, info: IsolationInfo,
              child_env: dict[str, str], writable: list[Path], readable: list[Path], uid: int | None,
              marker: str | None, cancel: threading.Event | None, warm: WarmStart | None, space: RunSpace | None,
              disk_cap: str, seccomp_fd: int | None, teardown: TeardownWatch | None = None) -> SandboxResult:
    space_tmp = space.tmp if space is not None else None
    space_shm = space.shm if space is not None else None
    # The run's variables are set by ``env -i`` (exec_env_prefix), never in the environment of what
    # starts before it (host_env): under bubblewrap after the uid drop, inside the sandbox, as the last
    # exec; without bubblewrap and without a uid drop the same (after the capability sets are emptied).
    # Without bubblewrap but with a uid drop, the drop (setpriv, still root, which execs the program with
    # the privileges it had: the program path may lie below a directory only root can pass, as a venv's
    # interpreter under /root) is the last exec, and env -i comes just before it with the variables minus
    # every loader, C-library and shell one (never allowed from a user; see sandbox.userenv), so nothing
    # that runs as root loads code because of them.
    env_args = exec_env_prefix(child_env)
    last = env_args
    if info.level == "bwrap":
        prefix = bwrap_prefix(workspace=workspace, writable=writable, readable=readable, uid=uid,
                              tmp_bytes=limits.disk_bytes, tmp_dir=space_tmp, shm_dir=space_shm, chdir=start_dir,
                              seccomp_fd=seccomp_fd)
    else:
        prefix = unshare_prefix() if info.level == "unshare" else []
        if uid is not None:
            safe, dropped = host_safe_env(child_env)
            if dropped:
                logger.warning("sandbox: not passing %s to a run at the %s level (loader, C-library or shell "
                               "variables never reach the uid drop, which runs as root)", ", ".join(dropped),
                               info.level)
            env_args = exec_env_prefix(safe)
            prefix += env_args + drop_uid_prefix(uid)
            last = []
        else:  # the namespace's root (unshare) or the user itself: all capability sets emptied first
            prefix += drop_caps_prefix(bounding=info.level == "unshare")
    pairs = rlimit_pairs(limits)
    limiter = prlimit_prefix(pairs)
    preexec = None if limiter else functools.partial(apply_rlimits, pairs)  # the limits without prlimit
    cgroup, control, control_reasons = open_for_run(limits.run_memory_bytes, limits.run_processes)
    try:
        res = _run(command, start_dir, limits, info, child_env, prefix, last, env_args, limiter, preexec, pairs, uid,
                   marker, cancel, warm, cgroup, space, seccomp_fd, teardown)
    finally:
        if cgroup is not None:
            cgroup.remove()  # strays included: whatever of the run is left in it dies here
    res.disk_cap = disk_cap
    res.resource_control = control
    res.resource_control_reasons = list(control_reasons)
    res.seccomp = info.seccomp_text()
    return res


def start_directory(workspace: Path, cwd: str | None) -> Path:
    """``workspace/cwd`` resolved: a directory inside ``workspace`` (ValueError otherwise; a link
    in the copy that leads out of it is refused too)."""
    if not cwd or cwd in (".", "./"):
        return workspace
    if os.path.isabs(cwd):
        raise ValueError(f"the working directory {cwd!r} must be relative to the repository")
    target = (workspace / cwd).resolve()
    if target != workspace and workspace not in target.parents:
        raise ValueError(f"the working directory {cwd!r} leaves the repository")
    if not target.is_dir():
        raise ValueError(f"the working directory {cwd!r} is not a directory of the repository")
    return target


def _run(command: list[str], workspace: Path, limits: Limits, info: IsolationInfo, child_env: dict[str, str],
         prefix: list[str], last: list[str], env_args: list[str], limiter: list[str] | None,
         preexec: Callable[[], object] | None,
         pairs: list[tuple[int, int]], uid: int | None, marker: str | None,
         cancel: threading.Event | None, warm: WarmStart | None, cgroup: RunCgroup | None,
         space: RunSpace | None, seccomp_fd: int | None, teardown: TeardownWatch | None = None) -> SandboxResult:
    # The cgroup wrapper first: it runs as root and makes every later process of the run a member.
    sandbox_argv = (cgroup.wrapper() if cgroup is not None else []) + (limiter or []) + prefix
    # ``last`` (env -i with the run's variables) goes right before the command; every process before it
    # has the fixed host_env (see run_in_sandbox).
    launch = sandbox_argv + last + list(command)
    argv = shown_argv(launch, env_args)
    logger.debug("sandbox argv: %s", argv)

    t0 = time.monotonic()
    proc: WarmProcess | subprocess.Popen[bytes] | None = None
    warm_fallback: str | None = None
    if warm is not None and info.level == "bwrap":
        # Waiting for a server still importing is bounded by the run's own timeout, and the run's
        # clock starts when its command does (warm or, after the wait, cold).
        proc, warm_fallback = _start_warm(warm, list(command), sandbox_argv, workspace, child_env, preexec, pairs,
                                          uid, cancel, limits.timeout_s, cgroup, seccomp_fd)
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
        proc = _start_cold(launch, workspace, marker, preexec, seccomp_fd)
    else:
        argv = [*sandbox_argv, "<warm>", *command]
    procs = RunProcs(proc.pid, uid, marker, getattr(proc, "command_pid", None),
                      frozenset(getattr(proc, "sandbox_pids", ())))
    stuck: list[Stuck] = []
    try:
        rc, out, err, timed_out, limit_hit, strays = supervise(proc, procs, limits, start, cancel,
                                                            cgroup.memory_hit if cgroup is not None else None,
                                                            teardown, stuck)
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
        if stream is not None:
            stream.close()

    sig: int | None = None
    exit_code: int | None = rc
    if rc < 0:
        sig, exit_code = -rc, None
    elif info.level == "bwrap" and 128 < rc < 128 + 32 and not timed_out:
        # bubblewrap reports a child killed by signal N as exit status 128 + N.
        sig, exit_code = rc - 128, None
    if cgroup is not None:
        cgroup.kill_all()  # anything of the run its uid or marker did not find
    if timed_out:
        limit_hit = "timeout"
    elif limit_hit is None:
        failed = sig is not None or exit_code != 0
        limit_hit = (_kernel_limit(failed, cgroup.limit_hit() if cgroup is not None else None,
                                   space is not None and space.full())
                     or _limit_from_signal(sig))
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
        stuck=stuck,
    )
