"""torch.distributed for tpx: the ``tpxgloo`` collective backend.

tpx tensors live in host memory, so collectives run gloo directly on zero-copy CPU views of
them (``backend.bridge.to_cpu``): gloo reads and writes the tpx memory itself, nothing is copied.

``TpxGlooProcessGroup`` is a Python ``ProcessGroup`` (c10d's ``Backend`` cannot be subclassed
from Python) that owns a real ``ProcessGroupGloo`` and forwards every collective to it with each
tpx tensor replaced by its CPU view; CPU (and CUDA) tensors pass through unchanged, so one group
serves every device. The returned work's future holds the caller's own (tpx) tensors, which is
what DDP's reducer builds its gradient views from.

Registration (``register()``, run by tpx's registration; ``torch.distributed`` is already imported
by ``import torch``, so this costs nothing at startup):

* ``Backend.register_backend("tpxgloo", ..., extended_api=True, devices=["tpx", "cpu"])``; tpx's
  entry of ``Backend.default_device_backend_map`` becomes ``"tpxgloo"``.
* ``init_process_group("gloo")`` and ``init_process_group()`` (no backend, tpx the accelerator)
  bind every device to ``tpxgloo``; ``"cpu:gloo,tpx:tpxgloo"`` and ``"tpxgloo"`` work as written.
  See docs/backend.md ("Distributed").
"""

from __future__ import annotations

import functools
import logging
from datetime import timedelta

import torch
import torch.distributed as dist

logger = logging.getLogger(__name__)

NAME = "tpxgloo"
DEVICES = ["tpx", "cpu"]

_done = False


def _cpu(obj):
    """``obj`` with every tpx tensor (also inside lists) replaced by its zero-copy CPU view."""
    from backend.bridge import to_cpu

    if isinstance(obj, torch.Tensor):
        return to_cpu(obj)
    if isinstance(obj, (list, tuple)):
        return [_cpu(o) for o in obj]
    return obj


class _DoneWork(dist._Work):
    """A finished collective; its future holds the caller's own tensors (tpx, not the views)."""

    def __init__(self, result) -> None:
        super().__init__()
        self._future = torch.futures.Future()
        self._future.set_result(result)

    def wait(self, timeout: timedelta | None = None) -> bool:
        return True

    def is_completed(self) -> bool:
        return True

    def is_success(self) -> bool:
        return True

    def get_future(self) -> torch.futures.Future:
        return self._future


class TpxGlooProcessGroup(dist.ProcessGroup):
    """gloo over zero-copy CPU views of tpx tensors. Collectives complete before returning
    (gloo's own work is waited on), so the tpx memory holds the result when the call returns."""

    def __init__(self, store, rank: int, size: int, timeout: timedelta) -> None:
        super().__init__(rank, size)
        self._gloo = dist.ProcessGroupGloo(store, rank, size, timeout)

    def _run(self, method: str, result, *args):
        work = getattr(self._gloo, method)(*(_cpu(a) for a in args))
        work.wait()
        return _DoneWork(result)

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
        return self._run("allgather", output_lists, output_lists, inputs, opts or dist.AllgatherOptions())

    def _allgather_base(self, output, input, opts=None):
        return self._run("_allgather_base", [output], output, input, opts or dist.AllgatherOptions())

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        return self._run("allgather_into_tensor_coalesced", outputs, outputs, inputs, opts or dist.AllgatherOptions())

    def gather(self, output_lists, inputs, opts=None):
        return self._run("gather", output_lists, output_lists, inputs, opts or dist.GatherOptions())

    def scatter(self, outputs, input_lists, opts=None):
        return self._run("scatter", outputs, outputs, input_lists, opts or dist.ScatterOptions())

    def reduce_scatter(self, outputs, input_lists, opts=None):
        return self._run("reduce_scatter", outputs, outputs, input_lists, opts or dist.ReduceScatterOptions())

    def _reduce_scatter_base(self, output, input, opts=None):
        return self._run("_reduce_scatter_base", [output], output, input, opts or dist.ReduceScatterOptions())

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

    def barrier(self, opts=None):
        return self._run("barrier", [], opts or dist.BarrierOptions())

    def getBackendName(self) -> str:
        return NAME

    def name(self) -> str:
        return NAME


def _create(opts, _backend_options) -> TpxGlooProcessGroup:
    return TpxGlooProcessGroup(opts.store, opts.group_rank, opts.group_size, opts.timeout)


def register() -> None:
    """Register ``tpxgloo`` and route gloo/default initialisation of tpx to it (idempotent)."""
    global _done
    if _done or not dist.is_available():
        return
    _done = True
    dist.Backend.register_backend(NAME, _create, extended_api=True, devices=DEVICES)
    dist.Backend.default_device_backend_map["tpx"] = NAME
    _patch_backend_config()
    logger.debug("tpx: c10d backend %r registered", NAME)


def _patch_backend_config() -> None:
    """``"gloo"`` names a CPU/CUDA-only backend and no backend picks just the accelerator's;
    with tpx present both mean "gloo on every device", which is what ``tpxgloo`` is. Device
    strings such as ``"cpu:gloo,tpx:tpxgloo"`` are left as written."""
    from torch.distributed import distributed_c10d as c10d

    cls = c10d.BackendConfig
    if getattr(cls.__init__, "_tpx_patched", False):
        return
    original = cls.__init__

    @functools.wraps(original)
    def __init__(self, backend) -> None:
        original(self, backend)
        name = str(backend).lower()
        values = {str(v) for v in self.device_backend_map.values()}
        if name in (dist.Backend.GLOO, dist.Backend.UNDEFINED) and values <= {dist.Backend.GLOO, NAME}:
            devices = set(self.device_backend_map) | set(DEVICES)
            self.device_backend_map = {d: dist.Backend(NAME) for d in sorted(devices)}

    __init__._tpx_patched = True
    cls.__init__ = __init__
