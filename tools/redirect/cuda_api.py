"""Replacements for ``torch.cuda.*`` that answer for the target device (cpu or tpx)."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from typing import TYPE_CHECKING, Any, NoReturn

import torch

from .device_props import RedirectDeviceProperties, redirect_properties
from .graphs import graph_api
from .sites import RedirectUnsupportedError, SiteCounter
from .tables import NVTX_FUNCTIONS

if TYPE_CHECKING:  # typing only: the sandboxed child imports no more than it needs
    from collections.abc import Callable, Iterator


def _from_torch_internals(depth: int = 2, tracer: str = "torch._dynamo.variables.") -> bool:
    """True when the caller is PyTorch itself (it must keep seeing the real answer). Dynamo folding
    the call while it traces the program's code (``dynamo_rules``; modules named from ``tracer``)
    asks for the program."""
    name: str = sys._getframe(depth).f_globals.get("__name__", "")
    if name.startswith(tracer):
        return False
    return name == "torch" or name.startswith("torch.")


class _TimingEvent:
    """``torch.cuda.Event`` stand-in: records host time after synchronising the target."""

    def __init__(self, sync: Callable[[], None], enable_timing: bool = False, blocking: bool = False,
                 interprocess: bool = False) -> None:
        self._sync = sync
        self.enable_timing = enable_timing
        self._t: float | None = None

    def record(self, stream: object = None) -> None:
        self._sync()
        self._t = time.perf_counter()

    def synchronize(self) -> None:
        self._sync()

    def wait(self, stream: object = None) -> None:
        self._sync()

    def query(self) -> bool:
        return True

    def elapsed_time(self, end: _TimingEvent) -> float:
        if self._t is None or end._t is None:
            raise RuntimeError("elapsed_time: both events must be recorded first")
        return (end._t - self._t) * 1000.0


class _Stream:
    """``torch.cuda.Stream`` stand-in: work is ordered on the target, so waits are syncs."""

    def __init__(self, sync: Callable[[], None], device: object = None, priority: int = 0, **_: object) -> None:
        self._sync = sync
        self.device = device
        self.priority = priority

    def synchronize(self) -> None:
        self._sync()

    def wait_stream(self, other: object) -> None:
        self._sync()

    def wait_event(self, event: object) -> None:
        self._sync()

    def record_event(self, event: _TimingEvent | None = None) -> _TimingEvent:
        event = event or _TimingEvent(self._sync)
        event.record()
        return event

    def query(self) -> bool:
        return True

    def __enter__(self) -> _Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


#: device count the reference run reports for ``torch.cuda.device_count()`` (the runner sets it to the
#: launcher's processes per node); torchrun's ``LOCAL_WORLD_SIZE`` (else ``WORLD_SIZE``) counts as well
DEVICE_COUNT_ENV = "FERRY_REDIRECT_DEVICE_COUNT"


def _env_count(name: str) -> int:
    value = os.environ.get(name, "").strip()
    if not value:
        return 0
    if not value.isdigit():
        raise ValueError(f"{name}={value!r}: expected a number of devices")
    return int(value)


def redirected_device_count() -> int:
    """The CUDA device count of the reference run: at least 1, at least ``FERRY_REDIRECT_DEVICE_COUNT``
    and at least the launcher's processes per node (``LOCAL_WORLD_SIZE``, else ``WORLD_SIZE``), so
    ``torch.cuda.device_count() // world_size`` and ``set_device(local_rank)`` mean on the CPU what they
    mean on a node with one GPU per process. Read at each call (a spawned child inherits the variables)."""
    launcher = _env_count("LOCAL_WORLD_SIZE") or _env_count("WORLD_SIZE")
    return max(1, _env_count(DEVICE_COUNT_ENV), launcher)


def _device_index(device: object) -> int:
    """The ordinal ``torch.cuda.set_device`` was given (an int, "cuda:N", a cuda torch.device)."""
    if isinstance(device, bool):
        raise TypeError(f"invalid device {device!r}")
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "cuda":
            raise ValueError(f"Expected a cuda device, but got: {device}")
        return 0 if device.index is None else device.index
    raise TypeError(f"invalid device {device!r}")


def _meminfo() -> tuple[int, int]:
    fields: dict[str, int] = {}
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                key, value = line.split(":", 1)
                fields[key] = int(value.split()[0]) * 1024
    except OSError:
        return 0, 0
    return fields.get("MemAvailable", 0), fields.get("MemTotal", 0)


#: on a replacement that logs its call site: the answer alone, unlogged (``answer_of``)
ANSWER_ATTR = "_ferry_redirect_answer"


def answer_of(replacement: Any) -> Callable[..., Any]:
    """What ``replacement`` (one of ``build_cuda_api``'s) answers, without logging a call site: for
    another replacement that logs its own (``torch.accelerator.device_count`` answers as
    ``torch.cuda.device_count``, and the program's line is one call of ``torch.accelerator``'s)."""
    answer: Callable[..., Any] = getattr(replacement, ANSWER_ATTR, replacement)
    return answer


def build_cuda_api(target: str, rec: SiteCounter) -> dict[str, object]:
    """name -> replacement for ``torch.cuda.<name>``."""
    dm = getattr(torch, target, None) if target != "cpu" else None
    # the real answers, for PyTorch's own calls (taken before the replacements are installed)
    real_is_available: Callable[[], bool] = torch.cuda.is_available
    real_device_count: Callable[[], int] = torch.cuda.device_count
    real_is_initialized: Callable[[], bool] = torch.cuda.is_initialized  # untyped in torch

    def sync(device: object = None) -> None:
        if dm is not None and hasattr(dm, "synchronize"):
            dm.synchronize()

    def logged(api: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            rec.record(f"torch.cuda.{api}", skip=3)
            return fn(*args, **kwargs)

        wrapper.__name__ = api
        wrapper.__qualname__ = f"cuda.{api}"
        setattr(wrapper, ANSWER_ATTR, fn)
        return wrapper

    def logged_class(api: str, base: type[Any]) -> type[Any]:
        """A class (torch itself asks ``isinstance(obj, torch.cuda.Event)``, e.g. when a future's value
        is searched for tensors) whose construction is logged and synchronises on the target."""

        def init(self: Any, *args: Any, **kwargs: Any) -> None:
            rec.record(f"torch.cuda.{api}", skip=3)
            base.__init__(self, sync, *args, **kwargs)

        return type(api, (base,), {"__init__": init, "__module__": "torch.cuda", "__qualname__": api})

    def from_dm(name: str, default: Callable[..., Any]) -> Callable[..., Any]:
        fn = getattr(dm, name, None) if dm is not None else None
        if fn is None:
            return default
        return lambda *a, **k: fn()  # one device: the ordinal the code passed is always 0

    def is_available() -> bool:
        if _from_torch_internals():
            return bool(real_is_available())
        rec.record("torch.cuda.is_available", skip=3)
        return True

    def device_count() -> int:
        if _from_torch_internals():
            return int(real_device_count())
        rec.record("torch.cuda.device_count", skip=3)
        return redirected_device_count()

    setattr(device_count, ANSWER_ATTR, redirected_device_count)

    current = [0]  # the ordinal the program selected last (torch.cuda.current_device answers it)

    def set_device(device: object) -> None:
        index = _device_index(device)
        if index < 0:
            return  # CUDA ignores a negative ordinal too
        count = redirected_device_count()
        if index >= count:
            # CUDA's own error: the reference run has as many devices as the launcher started processes
            raise RuntimeError(f"CUDA error: invalid device ordinal (device {index}, {count} device(s) in the "
                               f"reference run; set {DEVICE_COUNT_ENV} for more)")
        current[0] = index

    def is_initialized() -> bool:
        if _from_torch_internals():
            return bool(real_is_initialized())
        return True

    def props(device: object = None) -> RedirectDeviceProperties:
        """CUDA's properties structure, every field PyTorch reads from it included (Inductor reads
        them too); the target's own properties (tpx's) supply what they describe."""
        target_props: object = None
        if dm is not None and hasattr(dm, "get_device_properties"):
            try:
                target_props = dm.get_device_properties()
            except Exception:  # the host description alone
                target_props = None
        return redirect_properties(f"ferry-redirect:{target}", _meminfo()[1], torch.get_num_threads(),
                                   target_props)

    @contextlib.contextmanager
    def device_ctx(device: object = None) -> Iterator[None]:
        yield

    def stream_ctx(stream: object = None) -> contextlib.nullcontext[object]:
        return contextlib.nullcontext(stream)

    def zero(*a: object, **k: object) -> int:
        return 0

    def noop(*a: object, **k: object) -> None:
        return None

    def mem_get_info(device: object = None) -> tuple[int, int]:
        if dm is not None and hasattr(dm, "mem_get_info"):
            free_total: tuple[int, int] = dm.mem_get_info()
            return free_total
        return _meminfo()

    def rng_state(device: object = None) -> torch.Tensor:
        if dm is not None and hasattr(dm, "get_rng_state"):
            state: torch.Tensor = dm.get_rng_state()
            return state
        return torch.get_rng_state()

    def set_rng_state(state: torch.Tensor, device: object = None) -> None:
        if dm is not None and hasattr(dm, "set_rng_state"):
            dm.set_rng_state(state)
        else:
            torch.set_rng_state(state)

    def seed_fn(api: str) -> Callable[[int], None]:
        def seed(seed: int) -> None:
            # torch.manual_seed itself calls torch.cuda.manual_seed_all: nothing to add then.
            if _from_torch_internals():
                return
            rec.record(f"torch.cuda.{api}", skip=3)
            torch.manual_seed(seed)  # seeds every device, as the codemod's rewrite does

        seed.__name__ = api
        return seed

    def unsupported(api: str, why: str) -> Callable[..., NoReturn]:
        def fail(*a: object, **k: object) -> NoReturn:
            site = rec.site_text(skip=3)
            rec.record(f"torch.cuda.{api}", mapped_to="unsupported", skip=3)
            raise RedirectUnsupportedError(
                f"ferry redirect: torch.cuda.{api} cannot run on {target} (called at {site}): {why}")

        return fail

    graph_why = ("graphed callables are not mapped; call the modules or functions themselves (CUDAGraph and "
                 "torch.cuda.graph are)")
    api: dict[str, object] = {
        "is_available": is_available,
        "device_count": device_count,
        "is_initialized": is_initialized,
        "init": noop,
        "current_device": logged("current_device", lambda: current[0]),
        "set_device": logged("set_device", set_device),
        "device": logged("device", device_ctx),
        "get_device_name": logged("get_device_name", lambda device=None: props().name),
        "get_device_properties": logged("get_device_properties", props),
        "get_device_capability": logged("get_device_capability", lambda device=None: (props().major, props().minor)),
        # both targets compute bfloat16 (CPU natively, tpx by design): a program choosing bf16 over
        # fp16 by this question takes the same branch in the reference run as on the target
        "is_bf16_supported": logged("is_bf16_supported", lambda including_emulation=True: True),
        "synchronize": logged("synchronize", sync),
        "memory_allocated": logged("memory_allocated", from_dm("memory_allocated", zero)),
        "max_memory_allocated": logged("max_memory_allocated", from_dm("max_memory_allocated", zero)),
        "memory_reserved": logged("memory_reserved", from_dm("memory_reserved", zero)),
        "max_memory_reserved": logged("max_memory_reserved", from_dm("max_memory_reserved", zero)),
        "reset_peak_memory_stats": logged("reset_peak_memory_stats", from_dm("reset_peak_memory_stats", noop)),
        "reset_max_memory_allocated": logged("reset_max_memory_allocated", from_dm("reset_peak_memory_stats", noop)),
        "empty_cache": logged("empty_cache", from_dm("empty_cache", noop)),
        "memory_stats": logged("memory_stats", lambda device=None: {}),
        "mem_get_info": logged("mem_get_info", mem_get_info),
        "manual_seed": seed_fn("manual_seed"),
        "manual_seed_all": seed_fn("manual_seed_all"),
        "seed": logged("seed", lambda: torch.seed() and None),
        "seed_all": logged("seed_all", lambda: torch.seed() and None),
        "initial_seed": logged("initial_seed", torch.initial_seed),
        "get_rng_state": logged("get_rng_state", rng_state),
        "set_rng_state": logged("set_rng_state", set_rng_state),
        "get_rng_state_all": logged("get_rng_state_all", lambda: [rng_state()]),
        "set_rng_state_all": logged("set_rng_state_all", lambda states: set_rng_state(states[0])),
        "Event": logged_class("Event", _TimingEvent),
        "Stream": logged_class("Stream", _Stream),
        "current_stream": logged("current_stream", lambda device=None: _Stream(sync)),
        "default_stream": logged("default_stream", lambda device=None: _Stream(sync)),
        "stream": logged("stream", stream_ctx),
        **graph_api(rec),
        "make_graphed_callables": unsupported("make_graphed_callables", graph_why),
    }
    return api


def patch_nvtx(rec: SiteCounter) -> None:
    """``torch.cuda.nvtx`` annotations become no-ops (they only label profiler ranges)."""
    nvtx = getattr(torch.cuda, "nvtx", None)
    if nvtx is None:
        return
    for name in NVTX_FUNCTIONS:
        if not hasattr(nvtx, name):
            continue
        if name == "range":
            def rng(*a: object, **k: object) -> contextlib.nullcontext[None]:
                rec.record("torch.cuda.nvtx.range", skip=4)
                return contextlib.nullcontext()

            setattr(nvtx, name, rng)
        else:
            def marker(*a: object, _api: str = f"torch.cuda.nvtx.{name}", **k: object) -> int:
                rec.record(_api, skip=3)
                return 0

            setattr(nvtx, name, marker)
