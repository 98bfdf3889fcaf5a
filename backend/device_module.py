"""``torch.tpx``: the device module, shaped like ``torch.cuda``.

RNG: each device has a counter-based default generator with CUDA's (seed, offset) state; the
``*_rng_state`` / ``manual_seed`` functions act on those (backend/rng.py, which says where the
numbers come from: a seeded tpx run still matches the CPU run draw for draw).
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any

import torch

from . import _ext, config, graphs, rng, stats
from .devices import _index, current_device, device_count, ordinal_error

Stream = torch.Stream
Event = torch.Event

# graph capture, replayed eagerly (backend/graphs.py); CUDAGraph is the name code written for CUDA spells
Graph = graphs.Graph
CUDAGraph = graphs.Graph
graph = graphs.graph
make_graphed_callables = graphs.make_graphed_callables
graph_pool_handle = graphs.graph_pool_handle
is_current_stream_capturing = graphs.is_current_stream_capturing


def is_available() -> bool:
    return device_count() > 0


# As torch.cuda's: false until the program first uses the device (a tensor on it, set_device, init()).
# torch.distributed's DeviceMesh selects LOCAL_RANK's device only for a process whose device is not
# initialized yet; a device that always answered true would leave every rank of an FSDP2 program on tpx:0.
_initialized = [False]


def is_initialized() -> bool:
    return _initialized[0] and _ext.is_loaded()


def _lazy_init() -> None:
    """Called by PyTorch before the first tpx tensor of the process is made (device_lazy_init)."""
    _ext.get()
    _initialized[0] = True


def init() -> None:
    _lazy_init()


def _is_in_bad_fork() -> bool:
    return False


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return True


def get_amp_supported_dtype() -> list[torch.dtype]:
    return [torch.bfloat16, torch.float16]


def set_device(device) -> None:
    """Make ``device`` (an index, "tpx:i" or a torch.device) the current tpx device of this thread;
    a negative index is a no-op, as in torch.cuda."""
    idx = _index(device, check=False)
    if idx < 0:
        return
    if idx >= device_count():
        raise RuntimeError(ordinal_error(idx))
    _lazy_init()
    _ext.get().set_device(idx)


class device:
    """Context manager that changes the current tpx device (like ``torch.cuda.device``); None or
    a negative index leaves it alone."""

    def __init__(self, device) -> None:
        self.idx = _index(device, check=False) if device is not None else -1
        self.prev = -1

    def __enter__(self):
        self.prev = current_device()
        if self.idx >= 0:
            set_device(self.idx)
        return self

    def __exit__(self, *exc) -> None:
        if self.idx >= 0:
            set_device(self.prev)


class device_of(device):
    """Context manager that makes the tensor's device current (like ``torch.cuda.device_of``)."""

    def __init__(self, obj) -> None:
        idx = obj.get_device() if obj.device.type == "tpx" else -1
        super().__init__(idx)


def synchronize(device=None) -> None:
    """Wait for all work on the device (tpx kernels are synchronous: nothing is pending)."""
    torch.accelerator.synchronize(_index(device))


def current_stream(device=None) -> torch.Stream:
    _ext.get()
    return torch.accelerator.current_stream(_index(device))


def default_stream(device=None) -> torch.Stream:
    cur = current_stream(device)
    return torch.Stream(stream_id=0, device_index=cur.device_index, device_type=cur.device_type)


@contextlib.contextmanager
def stream(s: torch.Stream | None):
    """Make ``s`` the current tpx stream inside the block."""
    if s is None:
        yield
        return
    prev = current_stream(s.device_index)
    torch.accelerator.set_stream(s)
    try:
        yield
    finally:
        torch.accelerator.set_stream(prev)


def set_stream(s: torch.Stream) -> None:
    torch.accelerator.set_stream(s)


# ---------------------------------------------------------------- RNG: counter-based generators (backend/rng.py)
default_generator = rng.default_generator
manual_seed = rng.manual_seed
manual_seed_all = rng.manual_seed_all
seed = rng.seed
seed_all = rng.seed_all
initial_seed = rng.initial_seed
get_rng_state = rng.get_rng_state
set_rng_state = rng.set_rng_state
get_rng_state_all = rng.get_rng_state_all
set_rng_state_all = rng.set_rng_state_all


# ---------------------------------------------------------------- memory (per device)
def memory_allocated(device=None) -> int:
    return _ext.get().memory_allocated(_index(device))


def max_memory_allocated(device=None) -> int:
    return _ext.get().max_memory_allocated(_index(device))


def memory_reserved(device=None) -> int:
    return memory_allocated(device)


def max_memory_reserved(device=None) -> int:
    return max_memory_allocated(device)


def reset_peak_memory_stats(device=None) -> None:
    _ext.get().reset_peak(_index(device))


def reset_max_memory_allocated(device=None) -> None:
    reset_peak_memory_stats(device)


def mem_get_info(device=None) -> tuple[int, int]:
    """(free bytes, total bytes) of the device's simulated capacity."""
    ext, idx = _ext.get(), _index(device)
    cap = ext.capacity(idx)
    return max(cap - ext.memory_allocated(idx), 0), cap


def memory_stats(device=None) -> dict[str, Any]:
    """CUDA-style counters of one device: bytes and allocations (current/peak/allocated/freed),
    ``num_ooms`` and the simulated ``capacity``."""
    st = dict(_ext.get().memory_stats(_index(device)))
    st["reserved_bytes.all.current"] = st["allocated_bytes.all.current"]
    st["reserved_bytes.all.peak"] = st["allocated_bytes.all.peak"]
    st["active_bytes.all.current"] = st["allocated_bytes.all.current"]
    return st


def empty_cache() -> None:
    """tpx has no caching allocator: freed tensors return their memory immediately."""


# ---------------------------------------------------------------- properties
@dataclasses.dataclass(frozen=True)
class TpxDeviceProperties:
    name: str
    total_memory: int
    type: str = "tpx"
    major: int = 1
    minor: int = 0
    multi_processor_count: int = 1
    is_integrated: bool = True  # memory is host memory


def get_device_name(device=None) -> str:
    _index(device)
    return config.get_config().device_name


def get_device_properties(device=None) -> TpxDeviceProperties:
    _index(device)
    cfg = config.get_config()
    return TpxDeviceProperties(name=cfg.device_name, total_memory=cfg.memory_capacity)


def get_device_capability(device=None) -> tuple[int, int]:
    return (1, 0)


# ---------------------------------------------------------------- statistics
def op_stats() -> dict[str, Any]:
    """Per-op calls/time, CPU-fallback ops, device-to-host syncs and bytes moved since the last reset."""
    return stats.snapshot()


def reset_op_stats() -> None:
    stats.reset()
