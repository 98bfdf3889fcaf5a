"""torch.distributed for tpx: the ``tpxgloo`` collective backend.

tpx tensors live in host memory, so collectives run gloo directly on zero-copy CPU views of
them (``backend.bridge.to_cpu``): gloo reads and writes the tpx memory itself, nothing is copied.

``TpxGlooProcessGroup`` is a Python ``ProcessGroup`` (c10d's ``Backend`` cannot be subclassed
from Python) that owns a real ``ProcessGroupGloo`` and forwards every collective to it with each
tpx tensor replaced by its CPU view; CPU tensors pass through unchanged, so one group serves tpx
and CPU tensors (object collectives, CPU barriers). The returned work wraps gloo's own, still
running when ``async_op=True``; its future holds the caller's own (tpx) tensors, which is what
DDP's reducer builds its gradient views from, and is made on the caller's thread once gloo is done
(``_Work``: nothing of Python runs on gloo's threads, so a group freed with the GIL held cannot
deadlock its process). Ops whose gloo binding is missing
(``*_coalesced`` tensor collectives) are run one tensor at a time.

Registration (``register()``, run by tpx's registration; ``torch.distributed`` is already imported
by ``import torch``, so this costs nothing at startup) is PyTorch's own mechanism for a device's
backend, with nothing patched:
``Backend.register_backend("tpxgloo", ..., extended_api=True, devices=["tpx"])`` makes it tpx's
entry of ``Backend.default_device_backend_map``, so ``init_process_group()`` (tpx the
accelerator), ``init_process_group(device_id=torch.device("tpx", i))``,
``init_process_group(dist.get_default_backend_for_device("tpx"))``, ``"tpxgloo"`` and
``"cpu:gloo,tpx:tpxgloo"`` give this group. ``"gloo"`` is gloo, as in stock PyTorch (CPU/CUDA
only). See docs/backend.md ("Distributed").
"""

from __future__ import annotations

import atexit
import logging
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

logger = logging.getLogger(__name__)

NAME = "tpxgloo"
DEVICES = ["tpx"]

_done = False
# every gloo group this process made, released at exit (``_keep``)
_KEPT: list[Any] = []


def _cpu(obj: Any) -> Any:
    """``obj`` with every tpx tensor (also inside lists) replaced by its zero-copy CPU view."""
    from .bridge import to_cpu

    if isinstance(obj, torch.Tensor):
        return to_cpu(obj)
    if isinstance(obj, (list, tuple)):
        return [_cpu(o) for o in obj]
    return obj


def _opts(name: str) -> Any:
    return getattr(torch._C._distributed_c10d, name)()


def _keep(gloo: Any) -> None:
    """Hold ``gloo`` (a ``ProcessGroupGloo``) until the process exits.

    c10d's reducer (DDP) holds the group, and a DDP script frees it at its end with the GIL held:
    when that reference is the group's last, gloo's destructor joins its worker thread under the
    GIL, while that thread may be freeing a finished collective's tensors, which needs the GIL
    (their Python objects): the process never exits. Held here, the reducer's reference is never
    the last; at exit the list is cleared from Python, and pybind's holder releases the
    GIL while gloo joins its (by then idle) threads. A destroyed group keeps its two threads and
    sockets until then."""
    if not _KEPT:
        atexit.register(_KEPT.clear)
    _KEPT.append(gloo)


class _Work(dist._Work):
    """gloo's work(s) for one collective; its future's value is the caller's own (tpx) tensors.

    No Python callable is ever chained on gloo's futures: gloo completes them on its worker thread,
    and a Python callback there (run, or only freed) needs the GIL. c10d frees a group with the GIL
    held when a reducer holds its last reference (a DDP script's end) and joins that thread: with a
    callback pending the process never exits. So this work is complete when gloo's are, and its
    future is made on the caller's thread once they are (``get_future`` waits first: DDP's reducer
    asks for it as it launches a bucket, so buckets are reduced in turn, not overlapped)."""

    def __init__(self, works: Sequence[Any], result: Any) -> None:
        super().__init__()
        self._works = list(works)
        self._result = result
        self._future: torch.futures.Future | None = None

    def wait(self, timeout: timedelta | None = None) -> bool:
        for w in self._works:
            w.wait() if timeout is None else w.wait(timeout)
        return True

    def is_completed(self) -> bool:
        return all(w.is_completed() for w in self._works)

    def is_success(self) -> bool:
        return self.is_completed() and all(w.is_success() for w in self._works)

    def exception(self) -> Any:
        for w in self._works:
            if w.exception() is not None:
                return w.exception()
        return None

    def get_future(self) -> torch.futures.Future:
        if self._future is None:
            future: torch.futures.Future = torch.futures.Future()
            try:
                self.wait()
            except Exception as exc:  # gloo's error reaches whoever waits on the future
                future.set_exception(exc)
            else:
                future.set_result(self._result)
            self._future = future
        return self._future


class TpxGlooProcessGroup(dist.ProcessGroup):
    """gloo over zero-copy CPU views of tpx tensors (and over CPU tensors as given)."""

    def __init__(self, store: dist.Store, rank: int, size: int, timeout: timedelta) -> None:
        super().__init__(rank, size)
        self._gloo = dist.ProcessGroupGloo(store, rank, size, timeout)
        _keep(self._gloo)
        # c10d asks groups for their per-device backend (``_get_backend``: ``device_id=`` binding,
        # object collectives' device); the collectives themselves are this class's methods
        for device in ("cpu", "tpx"):
            self._register_backend(torch.device(device), dist.ProcessGroup.BackendType.CUSTOM, self._gloo)

    def _run(self, method: str, result: Any, *args: Any) -> _Work:
        return _Work([getattr(self._gloo, method)(*(_cpu(a) for a in args))], result)

    def _each(self, method: str, result: Any, pairs: Sequence[tuple[Any, Any]], opts: Any) -> _Work:
        """A coalesced op as one gloo op per (output, input) pair, issued in order on every rank."""
        return _Work([getattr(self._gloo, method)(_cpu(o), _cpu(i), opts) for o, i in pairs], result)

    # collectives: (inputs/outputs as the caller gave them, options)
    def allreduce(self, tensors, opts=None):
        return self._run("allreduce", tensors, tensors, opts or dist.AllreduceOptions())

    def allreduce_coalesced(self, tensors, opts=None):
        return self._run("allreduce_coalesced", tensors, tensors, opts or dist.AllreduceCoalescedOptions())

    def broadcast(self, tensors, opts=None):
        return self._run("broadcast", tensors, tensors, opts or dist.BroadcastOptions())

    def reduce(self, tensors, opts=None):
        return self._run("reduce", tensors, tensors, opts or dist.ReduceOptions())

    def allgather(self, output_lists, inputs, opts=None):
        return self._run("allgather", output_lists, output_lists, inputs, opts or _opts("AllgatherOptions"))

    def allgather_coalesced(self, output_lists, inputs, opts=None):
        return self._run("allgather_coalesced", output_lists, output_lists, inputs, opts or _opts("AllgatherOptions"))

    def _allgather_base(self, output, input, opts=None):
        return self._run("_allgather_base", [output], output, input, opts or _opts("AllgatherOptions"))

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        return self._each("_allgather_base", outputs, list(zip(outputs, inputs, strict=True)),
                          opts or _opts("AllgatherOptions"))

    def gather(self, output_lists, inputs, opts=None):
        return self._run("gather", output_lists, output_lists, inputs, opts or dist.GatherOptions())

    def scatter(self, outputs, input_lists, opts=None):
        return self._run("scatter", outputs, outputs, input_lists, opts or dist.ScatterOptions())

    def reduce_scatter(self, outputs, input_lists, opts=None):
        return self._run("reduce_scatter", outputs, outputs, input_lists, opts or dist.ReduceScatterOptions())

    def _reduce_scatter_base(self, output, input, opts=None):
        return self._run("_reduce_scatter_base", [output], output, input, opts or dist.ReduceScatterOptions())

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        return self._each("_reduce_scatter_base", outputs, list(zip(outputs, inputs, strict=True)),
                          opts or dist.ReduceScatterOptions())

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        return self._run(
            "alltoall_base", [output], output, input, output_split_sizes, input_split_sizes,
            opts or dist.AllToAllOptions(),
        )

    def alltoall(self, outputs, inputs, opts=None):
        return self._run("alltoall", outputs, outputs, inputs, opts or dist.AllToAllOptions())

    def send(self, tensors, dst: int, tag: int = 0):
        return self._run("send", tensors, tensors, dst, tag)

    def recv(self, tensors, src: int, tag: int = 0):
        return self._run("recv", tensors, tensors, src, tag)

    def recv_anysource(self, tensors, tag: int = 0):
        return self._run("recv_anysource", tensors, tensors, tag)

    def barrier(self, opts=None):
        return self._run("barrier", [], opts or dist.BarrierOptions())

    # PyTorch 2.13's names (dist.all_gather_into_tensor calls all_gather_single, ...); C++ callers
    # such as functional collectives try these first and fall back to the older names above
    all_gather_single = _allgather_base
    all_gather_single_coalesced = allgather_into_tensor_coalesced
    reduce_scatter_single = _reduce_scatter_base
    reduce_scatter_single_coalesced = reduce_scatter_tensor_coalesced
    all_to_all_single = alltoall_base

    def getBackendName(self) -> str:
        return NAME

    def name(self) -> str:
        return NAME


def _create(opts: Any, _backend_options: Any) -> TpxGlooProcessGroup:
    return TpxGlooProcessGroup(opts.store, opts.group_rank, opts.group_size, opts.timeout)


def register() -> None:
    """Register ``tpxgloo`` as tpx's collective backend (idempotent)."""
    global _done
    if _done or not dist.is_available():
        return
    _done = True
    dist.Backend.register_backend(NAME, _create, extended_api=True, devices=DEVICES)
    logger.debug("tpx: c10d backend %r registered for %s", NAME, DEVICES)
