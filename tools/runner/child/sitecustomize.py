"""Ferry's bootstrap for sandboxed children (first on PYTHONPATH, imported by ``site``).

Without touching user code it: seeds ``random`` (and numpy/torch once imported) from
``FERRY_SEED``; once torch is imported, loads the tpx backend (``FERRY_DEVICE=tpx``), seeds
torch and installs the CUDA redirect (``FERRY_REDIRECT_CUDA``); then, when
``FERRY_PROBE_DIR`` / ``FERRY_PROFILE_DIR`` are set, calls the probe/profile hooks of
``tools.probe.child`` / ``tools.profile.child``. Failures of Ferry's own hooks are reported
on stderr and never stop the user's program, except a redirect that cannot install (the run
would silently not be what was asked for).

Everything of Ferry's it loads is under one private package (``GUEST``): ``_ferry_guest.backend``,
``_ferry_guest.tools.redirect.install``... Those modules import the standard library and torch only
(relative imports inside their package, ``tools/guest.py`` across packages), so the user's own
interpreter (``--python``) needs torch and nothing of Ferry's, and the user's own ``backend``,
``tools``, ``sandbox``, ``agent`` packages are the ones their code imports.
"""

import os
import sys
import time

_T_START = time.time()  # the bootstrap's start: the interpreter is up (a warm start resets it after the fork)

# Only the checker sees these imports (a constant it reads as true): this module runs at every
# start-up of the user's interpreter and imports nothing it does not need, typing included.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from importlib.machinery import ModuleSpec
    from types import ModuleType, TracebackType
    from typing import Any

# Ferry's checkout/installation (the folder holding backend/, tools/, sandbox/...): the runner's
# FERRY_ROOT, else where this file lies (tools/runner/child/ under it).
FERRY_ROOT = os.environ.get("FERRY_ROOT") or os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.abspath(__file__)))))
WARM_SERVER_ENV = "FERRY_WARM_SERVER"  # set in a warm server's own environment (tools.runner.warm)
# The one name Ferry takes in the user's process: a package (no file of its own) whose path is
# FERRY_ROOT, so Ferry's child-side code loads as _ferry_guest.backend, _ferry_guest.tools.redirect...
# and the user's own backend/, tools/, sandbox/ (or none) stay what `import backend` finds. Never on
# sys.path: nothing of Ferry's shadows a user module, nothing of the user's shadows Ferry's.
GUEST = "_ferry_guest"


def _say(msg: str) -> None:
    sys.stderr.write(f"ferry bootstrap: {msg}\n")


def _seed() -> int:
    # Not sandbox.envvars: this runs at every interpreter start in the sandbox, before anything of
    # Ferry's is imported.
    try:
        return int(os.environ.get("FERRY_SEED", "0"))
    except ValueError:
        _say(f"FERRY_SEED={os.environ.get('FERRY_SEED')!r} is not an integer; using 0")
        return 0


def _guest_package() -> "ModuleType":
    """The private parent package (made once; a spawned or forked child has its own)."""
    package = sys.modules.get(GUEST)
    if package is None:
        from importlib.machinery import ModuleSpec

        spec = ModuleSpec(GUEST, None, is_package=True)
        spec.submodule_search_locations = [FERRY_ROOT]
        package = type(sys)(GUEST, "Ferry's child-side runtime (tools/runner/child/sitecustomize.py)")
        package.__spec__ = spec
        package.__path__ = [FERRY_ROOT]
        package.__package__ = GUEST
        sys.modules[GUEST] = package
    return package


def _import_own(name: str) -> "ModuleType":
    """Ferry's module ``name`` (``"tools.probe.child"``), loaded under the private package."""
    import importlib

    _guest_package()
    return importlib.import_module(f"{GUEST}.{name}")


class _PostImportFinder:
    """Runs ``hook(module)`` right after selected modules finish importing (a meta path finder;
    not derived from importlib.abc, whose import alone costs more than this whole bootstrap)."""

    def __init__(self) -> None:
        self.hooks: dict[str, Callable[[ModuleType], None]] = {}

    def find_spec(self, name: str, path: "Sequence[str] | None" = None,
                  target: "ModuleType | None" = None) -> "ModuleSpec | None":
        hook = self.hooks.get(name)
        if hook is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        del self.hooks[name]
        original = loader.exec_module

        def exec_module(module: "ModuleType") -> None:
            original(module)
            hook(module)

        # the loader's own method, replaced on this instance only: the hook runs once the module's
        # code has run
        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


# Seconds the bootstrap spent on each of its parts before the user's first line (tpx's extension load, the
# CUDA redirect, torch's import, the probe/profiler hooks): written once per run (the first process to
# finish its bootstrap) to FERRY_STARTUP_FILE, which the runner reads as the run's start-up breakdown.
_TIMES: "dict[str, float]" = {}


def _timed(name: str, fn: "Callable[..., object]", *args: object) -> None:
    t = time.perf_counter()
    try:
        fn(*args)
    finally:
        _TIMES[name] = _TIMES.get(name, 0.0) + time.perf_counter() - t


def _write_startup(start: float) -> None:
    """The start-up breakdown, to FERRY_STARTUP_FILE (never replaced: the first process's is the run's);
    a failure is silent: timing must never disturb the run."""
    path = os.environ.get("FERRY_STARTUP_FILE")
    if not path:
        return
    try:
        fields = {"start": start, "ready": time.time(), **_TIMES}
        body = "{" + ", ".join(f'"{k}": {v!r}' for k, v in fields.items()) + "}"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        try:
            os.write(fd, body.encode())
        finally:
            os.close(fd)
    except Exception:  # an existing file (another process of the run wrote it), a read-only dir
        pass


def _load_device(torch: "ModuleType") -> None:
    device = os.environ.get("FERRY_DEVICE", "cpu")
    if device == "tpx" and not hasattr(torch, "tpx"):
        try:
            _import_own("backend")  # registers the tpx PrivateUse1 device
        except Exception as exc:
            _say(f"tpx backend could not be loaded ({type(exc).__name__}: {exc}); running without it")


def _on_torch(torch: "ModuleType") -> None:
    _timed("device_s", _load_device, torch)
    torch.manual_seed(_seed())
    if not os.environ.get(WARM_SERVER_ENV):  # a warm server installs it per run, after the fork
        _timed("redirect_s", _install_redirect)


def _install_redirect() -> None:
    if os.environ.get("FERRY_REDIRECT_CUDA"):
        _import_own("tools.redirect.install").install_from_env()


def _on_numpy(np: "ModuleType") -> None:
    try:
        np.random.seed(_seed() % (2**32))
    except Exception as exc:
        _say(f"could not seed numpy: {exc}")


def _install_tool(module_name: str, env_name: str) -> "ModuleType | None":
    if not os.environ.get(env_name):
        return None
    try:
        module = _import_own(module_name)
    except Exception as exc:
        _say(f"{env_name} is set but Ferry's {module_name} could not be loaded from {FERRY_ROOT} "
             f"({type(exc).__name__}: {exc}); continuing without it")
        return None
    try:
        module.install_from_env()
    except Exception as exc:
        _say(f"{module_name}.install_from_env() failed: {type(exc).__name__}: {exc}")
        return None
    return module


def _on_random(random: "ModuleType") -> None:
    random.seed(_seed())


_TOOLS = (("tools.probe.child", "FERRY_PROBE_DIR"), ("tools.profile.child", "FERRY_PROFILE_DIR"))
_INSTALLED: "list[ModuleType]" = []  # the tool modules installed here
_LAUNCHER_MODULES = ("torch.distributed.run", "torch.distributed.launch")


def _process_role() -> str:
    """What this process is in a multi-process job: ``launcher`` (torchrun's agent, multiprocessing's
    resource tracker: no model runs here), ``spawned`` (a ``spawn`` start-method child: its rank is
    known once torch.multiprocessing.spawn's ``_wrap`` runs), else ``main`` (a plain program or a
    torchrun worker, whose ``RANK`` is in its environment)."""
    argv = list(getattr(sys, "orig_argv", None) or [])
    names = [os.path.basename(a) for a in [*argv[1:2], *(sys.argv[:1] or [])]]
    if "torchrun" in names:
        return "launcher"
    for i, arg in enumerate(argv[:-1]):
        if arg == "-m" and argv[i + 1] in _LAUNCHER_MODULES:
            return "launcher"
        if arg == "-c" and "multiprocessing.resource_tracker" in argv[i + 1]:
            return "launcher"
    return "spawned" if "--multiprocessing-fork" in argv else "main"


def _rank_dirs(rank: int) -> None:
    """Rank N > 0 of a job writes its probe dump and profile under ``rank-N/`` of the run's dirs;
    rank 0's are the run's own (parity compares rank 0)."""
    if rank > 0:
        for name in ("FERRY_PROBE_DIR", "FERRY_PROFILE_DIR"):
            if os.environ.get(name):
                os.environ[name] = os.path.join(os.environ[name], f"rank-{rank}")


def _install_all() -> None:
    for module_name, env_name in _TOOLS:
        module = _install_tool(module_name, env_name)
        if module is not None:
            _INSTALLED.append(module)


def _discard_all() -> None:
    for module in _INSTALLED:
        try:
            module.discard_from_env()
        except Exception as exc:
            _say(f"{module.__name__}.discard_from_env() failed: {type(exc).__name__}: {exc}")


def _patch_spawn(torch: "ModuleType", role: str) -> None:
    """torch.multiprocessing.spawn: the parent's own (empty) dump and profile are dropped when it
    starts the workers; each worker installs the tools once ``_wrap`` knows its index (its rank)."""
    spawn: Any = sys.modules.get("torch.multiprocessing.spawn")
    if spawn is None:
        return
    if role == "spawned":
        wrap = spawn._wrap

        def _wrap(fn: "Callable[..., object]", i: int, *rest: object) -> object:
            _rank_dirs(i)
            _install_all()
            return wrap(fn, i, *rest)

        spawn._wrap = _wrap
        return
    start = spawn.start_processes

    def start_processes(*args: object, **kwargs: object) -> object:
        _discard_all()
        return start(*args, **kwargs)

    spawn.start_processes = start_processes


def _record_worker_errors() -> None:
    """A torchrun worker's uncaught exception goes to its ``TORCHELASTIC_ERROR_FILE`` (what
    ``@record`` does), so the launcher's "Root Cause" holds the first failing rank's traceback."""
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path or not os.environ.get("RANK"):
        return
    previous = sys.excepthook

    def hook(tp: "type[BaseException]", value: BaseException, tb: "TracebackType | None") -> None:
        try:
            if not os.path.exists(path):  # a worker's own @record wrote it already
                import json
                import time
                import traceback

                text = "".join(traceback.format_exception(tp, value, tb))
                data = {"message": {"message": f"{tp.__name__}: {value}",
                                    "extraInfo": {"py_callstack": text, "timestamp": str(int(time.time()))}}}
                with open(path, "w") as fh:
                    json.dump(data, fh)
        except Exception:
            pass
        previous(tp, value, tb)

    sys.excepthook = hook


_STACKS: "list[Any]" = []  # the open stack-dump file of this process (faulthandler writes into it)


def _stack_role() -> str:
    """``rank<N>`` (a torchrun worker), ``agent`` (torchrun's launcher) or ``proc``: how the runner's
    teardown watch (``sandbox.teardown``) tells the processes of a job apart."""
    rank = os.environ.get("RANK", "")
    if rank.isdigit() and os.environ.get("TORCHELASTIC_RUN_ID") is not None:
        return f"rank{int(rank)}"
    if _process_role() == "launcher" and not any("resource_tracker" in a for a in getattr(sys, "orig_argv", [])):
        return "agent"
    return "proc"


def _register_stacks() -> None:
    """Dump this process's Python stacks to ``FERRY_STACKS_DIR`` on ``FERRY_STACKS_SIGNAL`` (faulthandler,
    all threads), also in a forked child (its own file). The runner sends the signal only when the
    run is stalled in its teardown, to end it with every stuck process's stack."""
    where, sig = os.environ.get("FERRY_STACKS_DIR", ""), os.environ.get("FERRY_STACKS_SIGNAL", "")
    if not where or not sig.isdigit():
        return
    import faulthandler

    path = os.path.join(where, f"stack-{os.getpid()}-{_stack_role()}.txt")
    try:
        fh = open(path, "w")  # noqa: SIM115  (kept open: the handler writes into it at any time)
    except OSError as exc:
        _say(f"cannot write {path} ({exc.strerror}); a hang at exit will show no stack")
        return
    if _STACKS:
        _STACKS.pop().close()  # a fork's copy of the parent's file
    _STACKS.append(fh)
    faulthandler.register(int(sig), file=fh, all_threads=True, chain=False)


def _mark_exiting() -> None:
    """The main code is done and the interpreter shuts down (before it joins non-daemon threads and
    runs atexit handlers): the runner's teardown watch counts from here."""
    where = os.environ.get("FERRY_STACKS_DIR", "")
    try:
        os.close(os.open(os.path.join(where, f"exiting-{os.getpid()}"), os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW,
                         0o600))
    except OSError:
        pass


def _watch_teardown() -> None:
    if not os.environ.get("FERRY_STACKS_DIR"):
        return
    try:
        import threading

        _register_stacks()
        threading._register_atexit(_mark_exiting)  # type: ignore[attr-defined]
        os.register_at_fork(after_in_child=_register_stacks)
    except Exception as exc:  # never the user's program's problem
        _say(f"teardown watch not installed ({type(exc).__name__}: {exc})")


def _install_tools() -> None:
    if not (os.environ.get("FERRY_PROBE_DIR") or os.environ.get("FERRY_PROFILE_DIR")):
        return
    role = _process_role()
    if role == "launcher":
        return  # its workers record; the launcher's own empty dump would only get in their way
    t = time.perf_counter()
    before = _TIMES.get("device_s", 0.0) + _TIMES.get("redirect_s", 0.0)
    import torch  # (runs _on_torch first: backend, seed, redirect)

    if "torch_s" not in _TIMES:
        _TIMES["torch_s"] = max(0.0, time.perf_counter() - t - (_TIMES.get("device_s", 0.0)
                                                                 + _TIMES.get("redirect_s", 0.0) - before))
    _patch_spawn(torch, role)
    if role == "spawned":
        return  # installed by _wrap, under the worker's rank
    rank = os.environ.get("RANK", "")
    _rank_dirs(int(rank) if rank.isdigit() else 0)
    _timed("hooks_s", _install_all)


_HOOKS: "tuple[tuple[str, Callable[[ModuleType], None]], ...]" = (
    ("random", _on_random), ("torch", _on_torch), ("numpy", _on_numpy))


def _chain_next() -> None:
    """Run the ``sitecustomize`` this one hides: the first further on ``sys.path`` (the user's
    PYTHONPATH after Ferry's bootstrap directory, their interpreter's site-packages or its system
    directories: Debian's and Ubuntu's Pythons ship one). ``site`` imports one module of that name;
    without this the user's own would never run under Ferry. Its errors are reported the way
    ``site`` reports them and never stop the program; it does not replace this module in
    ``sys.modules`` (warm starts call ``sitecustomize.ferry_after_fork``)."""
    from importlib.machinery import PathFinder
    from importlib.util import module_from_spec

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.stderr.write(f"Error in sitecustomize ({spec.origin}); set PYTHONVERBOSE for traceback:\n"
                         f"{type(exc).__name__}: {exc}\n")


def _main() -> None:
    _guest_package()  # before any user code: unpickling Ferry's objects in a worker finds it
    finder = _PostImportFinder()
    for name, hook in _HOOKS:
        if name in sys.modules:
            hook(sys.modules[name])
        else:
            finder.hooks[name] = hook
    sys.meta_path.insert(0, finder)
    _watch_teardown()
    _record_worker_errors()
    _install_tools()
    _chain_next()
    _write_startup(_T_START)


def ferry_after_fork() -> None:
    """A warm start (``sandbox.warm``): this interpreter imported torch (on the CPU, nothing
    device-specific) before the run existed and was just forked into it with the run's environment
    (which has no ``FERRY_WARM_SERVER``). Run the hooks of the modules already imported, as ``_main``
    does for a fresh interpreter (torch's: the run's device backend, the seed, the CUDA redirect),
    then the probe/profile hooks. Modules imported later still meet the finder's hooks."""
    start = time.time()
    _TIMES.clear()  # the server's own start-up is not this run's
    for name, hook in _HOOKS:
        if name in sys.modules:
            hook(sys.modules[name])
    _watch_teardown()
    _record_worker_errors()
    _install_tools()
    _write_startup(start)


if os.environ.get("FERRY_BOOTSTRAP", "1") != "0":
    _main()
