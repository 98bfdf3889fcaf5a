"""The forked side of a warm start: enter one run's sandbox, become its command, run it.

``child_main`` runs in a process forked from the warm server (``sandbox.warm.serve``): it joins
the run's cgroup(s) and the namespaces bubblewrap made for the run, forks once more (a pid
namespace applies to children), reports the command's pid, waits for it and reports how it
ended. The grandchild takes the run's stdout/stderr, session, rlimits, working directory, uid
and environment, gives up every capability, calls the caller's after-fork hook (re-seeding,
per-run instrumentation) and then runs the Python invocation the way ``python`` itself would
(``__main__``, ``sys.argv``, ``sys.path[0]``, exit status, uncaught-exception traceback, atexit
handlers).

Messages to the host are JSON packets on the run's socket: ``{"started": pid}`` from the
waiter, then ``{"running": true}`` or ``{"setup_error": "..."}`` from the command before any
user code runs (a setup error lets the host fall back to a cold start), then ``{"exit": code}``
(Popen convention: negative for a signal).
"""

from __future__ import annotations

import atexit
import builtins
import importlib
import io
import json
import os
import runpy
import select
import signal
import socket
import sys
import threading
import traceback
import types
import zipfile
from collections.abc import Callable
from typing import Any

from sandbox import seccomp
from sandbox.warm.nsjoin import die_with_parent, drop_privileges, join_namespaces

_HERE = os.path.abspath(__file__)


def _send(sock: socket.socket, **msg: object) -> None:
    try:
        sock.send(json.dumps(msg).encode())
    except OSError:
        pass  # the host is gone; the run is being torn down anyway


def _orphaned(alive_r: int) -> bool:
    """True once the waiter holding the write end of this pipe is gone (the read end sees EOF)."""
    readable, _, _ = select.select([alive_r], [], [], 0)
    return bool(readable)


def child_main(request: bytes, sock: socket.socket, out_fd: int, err_fd: int, server_pid: int) -> None:
    """In the process forked from the warm server (``request``: the run's JSON). Never returns."""
    code = 0
    try:
        die_with_parent(signal.SIGKILL)
        if os.getppid() != server_pid:  # the server died before the line above: nobody would reap us
            os._exit(1)
        req = json.loads(request)
        _join_cgroups(req.get("cgroup_procs") or [])  # as root, before the namespaces and the uid change
        join_namespaces(int(req["ns_pid"]))
        alive_r, alive_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(alive_w)
            _command_main(req, sock, out_fd, err_fd, alive_r)  # never returns
        os.close(alive_r)
        os.close(out_fd)
        os.close(err_fd)
        _send(sock, started=pid)
        _, status = os.waitpid(pid, 0)
        _send(sock, exit=os.waitstatus_to_exitcode(status))
    except BaseException as exc:  # reported, then this process ends
        _send(sock, setup_error=f"{type(exc).__name__}: {exc}")
        code = 1
    os._exit(code)


def _join_cgroups(procs_files: list[str]) -> None:
    """Enter the run's cgroup(s) (``sandbox.cgroups``): the command forked next, and everything it
    starts, counts against the whole run's memory and process limits."""
    pid = str(os.getpid()).encode()
    for path in procs_files:
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.write(fd, pid)
        finally:
            os.close(fd)


def _command_main(req: dict[str, Any], sock: socket.socket, out_fd: int, err_fd: int, alive_r: int) -> None:
    # Die with the waiter from the first instant: a command that outlived it (its waiter killed,
    # or Ferry ending) would run on unsupervised. The pipe closes the window before the prctl.
    die_with_parent(signal.SIGKILL)
    if _orphaned(alive_r):
        os._exit(1)
    try:
        _become_command(req, out_fd, err_fd, alive_r)
        hook = _after_fork_hook(req.get("after_fork"))
    except BaseException as exc:
        _send(sock, setup_error=f"{type(exc).__name__}: {exc}")
        os._exit(1)
    _send(sock, running=True)
    sock.close()
    os.closerange(3, 1 << 16)
    _forget_server_modules()
    code = _run_guarded(hook, PythonInvocation(req["spec"]))
    _finish(code)


def _become_command(req: dict[str, Any], out_fd: int, err_fd: int, alive_r: int) -> None:
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(out_fd, 1)
    os.dup2(err_fd, 2)
    for fd in (devnull, out_fd, err_fd):
        if fd > 2:
            os.close(fd)
    os.setsid()
    import resource

    for res, soft, hard in req.get("rlimits", []):
        resource.setrlimit(res, (soft, hard))
    os.chdir(req["cwd"])
    # built before the privileges go (a program that cannot be built is a setup error: a cold start)
    program = seccomp.filter_program() if req.get("seccomp") else None
    if req.get("seccomp") and program is None:
        raise OSError(seccomp.unavailable_reason() or "no seccomp filter for this machine")
    drop_privileges(req.get("uid"))
    if program is not None:  # after no_new_privs, as bubblewrap does for a cold run
        seccomp.install(program)
    die_with_parent(signal.SIGKILL)  # again: the uid change cleared it
    if _orphaned(alive_r):
        os._exit(1)
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD, signal.SIGALRM):
        signal.signal(sig, signal.SIG_DFL)
    os.environ.clear()
    os.environ.update(req["env"])


def _after_fork_hook(ref: str | None) -> Callable[[], object] | None:
    if not ref:
        return None
    mod_name, _, func = ref.partition(":")
    module = sys.modules.get(mod_name)
    if module is None:
        # Never from the run's workspace (the cwd, and '' first on the server's sys.path): the run's
        # channel to Ferry is still open here, and user code must not run before it is closed.
        here = os.getcwd().rstrip("/") + "/"
        saved = list(sys.path)
        sys.path[:] = [p for p in saved if p and not (os.path.abspath(p).rstrip("/") + "/").startswith(here)]
        try:
            module = importlib.import_module(mod_name)
        finally:
            sys.path[:] = saved
    hook: Callable[[], object] = getattr(module, func)
    if not callable(hook):  # before user code: a setup error, so the run starts cold
        raise TypeError(f"the after-fork hook {ref} is not callable")
    return hook


def _forget_server_modules() -> None:
    """Ferry's own ``sandbox`` package must not shadow a user module of that name."""
    for name in [m for m in sys.modules if m == "sandbox" or m.startswith("sandbox.")]:
        del sys.modules[name]


class PythonInvocation:
    """``python [-u] SCRIPT|-m MODULE|-c CODE ARGS`` inside an already running interpreter."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.kind = spec["kind"]
        self.target = spec["target"]
        self.args = list(spec["args"])
        self.unbuffered = bool(spec.get("unbuffered"))
        self.program = spec.get("program") or sys.executable

    def _fresh_main(self, file: str | None) -> types.ModuleType:
        main = types.ModuleType("__main__")
        main.__builtins__ = builtins  # type: ignore[attr-defined]
        main.__annotations__ = {}
        if file is not None:
            from importlib.machinery import SourceFileLoader

            main.__file__ = file
            main.__cached__ = None  # type: ignore[attr-defined]
            main.__loader__ = SourceFileLoader("__main__", file)
        sys.modules["__main__"] = main
        return main

    def set_argv(self) -> None:
        """``sys.argv`` and ``sys.orig_argv`` as ``python`` would start them, before the after-fork hook
        runs: it tells torchrun's launcher from a worker by them (still the server's otherwise)."""
        option = {"module": ["-m"], "code": ["-c"]}.get(self.kind, [])
        sys.orig_argv = [self.program, *(["-u"] if self.unbuffered else []), *option, self.target, *self.args]
        sys.argv = {"module": ["-m"], "code": ["-c"]}.get(self.kind, [self.target]) + self.args

    def run(self) -> None:
        if self.unbuffered:
            for name, fd in (("stdout", 1), ("stderr", 2)):
                old = getattr(sys, name)
                old.flush()
                new = io.TextIOWrapper(io.FileIO(fd, "w", closefd=False), encoding=old.encoding, errors=old.errors,
                                       write_through=True)
                setattr(sys, name, new)
                setattr(sys, f"__{name}__", new)  # as in python -u: the original streams are these
        if self.kind == "script":
            path = os.path.abspath(self.target)
            sys.argv = [self.target, *self.args]
            if os.path.isdir(path) or zipfile.is_zipfile(path):  # runs its __main__ module, as python does
                sys.path[0] = path
                self._fresh_main(None)
                runpy._run_module_as_main("__main__", alter_argv=False)  # type: ignore[attr-defined]
                return
            sys.path[0] = os.path.dirname(path)
            try:
                with open(path, "rb") as fh:
                    source = fh.read()
            except OSError as exc:
                sys.stderr.write(f"{self.program}: can't open file {path!r}: [Errno {exc.errno}] {exc.strerror}\n")
                raise SystemExit(2) from None
            main = self._fresh_main(path)
            exec(compile(source, path, "exec", dont_inherit=True), main.__dict__)
        elif self.kind == "module":
            sys.argv = ["-m", *self.args]
            sys.path[0] = os.getcwd()
            self._fresh_main(None)  # not the server's own __main__ (its boot code's names)
            # what ``python -m`` calls (private, so not in the stubs)
            runpy._run_module_as_main(self.target, alter_argv=True)  # type: ignore[attr-defined]
        else:
            sys.argv = ["-c", *self.args]
            sys.path[0] = ""
            main = self._fresh_main(None)
            exec(compile(self.target, "<string>", "exec", dont_inherit=True), main.__dict__)


def _exit_code(exc: SystemExit) -> int:
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    try:
        sys.stderr.write(f"{code}\n")
    except Exception:
        pass
    return 1


def _user_tb(tb: types.TracebackType | None) -> types.TracebackType | None:
    """Drop this module's frames: the traceback starts where a cold ``python`` run's would."""
    while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename) == _HERE:
        tb = tb.tb_next
    return tb


_UNHANDLED_SIGINT = -int(signal.SIGINT)  # never an exit status (those are 0..255)


def _run_guarded(hook: Callable[[], object] | None, invocation: PythonInvocation) -> int:
    try:
        invocation.set_argv()
        if hook is not None:
            hook()
        invocation.run()
        return 0
    except SystemExit as exc:
        return _exit_code(exc)
    except BaseException as exc:  # an uncaught exception of the user's program
        exc.__traceback__ = _user_tb(exc.__traceback__)  # the default hook prints this one
        try:
            sys.excepthook(type(exc), exc, exc.__traceback__)
        except Exception:
            traceback.print_exception(exc)
        # python shuts down (threads, atexit, flush) and only then dies by SIGINT
        return _UNHANDLED_SIGINT if isinstance(exc, KeyboardInterrupt) else 1


def _finish_streams() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except Exception:
            pass


def _finish(code: int) -> None:
    """Interpreter shutdown as ``python`` does it: wait for non-daemon threads, run atexit
    handlers, flush the standard streams, exit."""
    try:
        threading._shutdown()  # type: ignore[attr-defined]
    except BaseException:
        pass
    try:
        atexit._run_exitfuncs()
    except BaseException:
        pass
    flushed = _flush_std_files()
    _finalize_main()
    _finish_streams()
    if code == _UNHANDLED_SIGINT:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        code = 130
    os._exit(code if flushed else 120)  # 120: what python exits with when that flush fails


def _flush_std_files() -> bool:
    """The flush of stdout/stderr at shutdown, as python does it: a failure (stdout closed under
    the program) is reported for stdout and makes the exit status 120."""
    ok = True
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is None or getattr(stream, "closed", False):
                continue
            stream.flush()
        except Exception as exc:
            ok = False
            if stream is sys.stdout:
                try:
                    sys.stderr.write(f"Exception ignored in: {stream!r}\n")
                    traceback.print_exception(type(exc), exc, None)
                except Exception:
                    pass
    return ok


def _finalize_main() -> None:
    """What interpreter shutdown does to ``__main__`` before the process ends: its globals are
    released (underscore names first, as CPython does), so objects only they hold are finalized
    (a file written and never closed gets flushed, ``__del__`` runs). ``os._exit`` alone would
    drop them."""
    main = sys.modules.get("__main__")
    names = getattr(main, "__dict__", None)
    if names is None:
        return
    try:
        for first in (True, False):
            for key in [k for k in names if k != "__builtins__" and k.startswith("_") == first]:
                names[key] = None
        import gc

        gc.collect()
    except BaseException:  # a finalizer's error is printed by Python, as at shutdown
        pass
