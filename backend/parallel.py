"""``nn.DataParallel`` on several tpx devices: the ``torch.nn.parallel.comm`` primitives.

DataParallel replicates the module with ``comm.broadcast_coalesced``, splits the batch with
``comm.scatter``, collects outputs with ``comm.gather`` and sums gradients with
``comm.reduce_add_coalesced`` (plain tensor ops, but asking for NCCL: ``reduce_add``). The first
three call C++ functions that exist only in CUDA builds of PyTorch (``torch._C._broadcast_coalesced``,
``_scatter``, ``_gather``). With two tpx devices (the default), code that wraps its model in
DataParallel when ``device_count() > 1`` takes that path on tpx, so tpx provides them as device
copies (each device has its own memory); for anything that is not tpx the original functions run.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import torch
from torch.nn.parallel import comm

_DEVICE = "tpx"


def _index(d) -> int:
    return torch._utils._get_device_index(d, optional=True)


def _on_tpx(tensors: Sequence[torch.Tensor]) -> bool:
    if any(t.device.type == _DEVICE for t in tensors):
        return True
    # integer device indices name the accelerator: tpx when it is one and CUDA is absent
    return not torch.cuda.is_available() and torch._C._get_privateuse1_backend_name() == _DEVICE


def _to(t: torch.Tensor, index: int) -> torch.Tensor:
    if t.device.type == _DEVICE and t.get_device() == index:
        return t  # as CUDA's broadcast: the source device's outputs are the inputs
    return t.to(torch.device(_DEVICE, index))


def broadcast_coalesced(tensors, devices, buffer_size=10485760):
    return [[_to(t, _index(d)) for t in tensors] for d in devices]


def broadcast(tensor, devices=None, *, out=None):
    if out is not None:
        for o in out:
            o.copy_(tensor)
        return tuple(out)
    return tuple(_to(tensor, _index(d)) for d in devices)


def scatter(tensor, devices=None, chunk_sizes=None, dim=0, streams=None, *, out=None):
    if out is not None:
        chunks = tensor.split([o.size(dim) for o in out], dim)
        for o, c in zip(out, chunks, strict=True):
            o.copy_(c)
        return tuple(out)
    idx = [_index(d) for d in devices]
    if chunk_sizes is None:
        chunks = tensor.chunk(len(idx), dim)
    else:
        chunks = tensor.split(list(chunk_sizes), dim)
    # copies (contiguous, like CUDA's scatter), each on its device
    return tuple(c.to(torch.device(_DEVICE, i), copy=True).contiguous()
                 for c, i in zip(chunks, idx, strict=False))


def reduce_add(inputs, destination=None):
    """The sum of same-shaped tensors on ``destination`` (default: the current device); as
    PyTorch's own, without asking for NCCL (which warns on every call in a build without it)."""
    index = _index(destination)
    roots = [t for t in inputs if t.device.type == _DEVICE and t.get_device() == index]
    if not roots:
        raise RuntimeError("reduce_add expects destination to be on the same device as one of the tensors")
    if len(inputs) == 1:
        return inputs[0]
    root = roots[0]
    result = root.clone()
    for t in inputs:
        if t is not root:
            result.add_(t.to(root.device))
    return result


def _gather_target(destination) -> torch.device:
    if isinstance(destination, int) or destination is None:
        return torch.device("cpu") if destination == -1 else torch.device(_DEVICE, _index(destination))
    d = torch.device(destination)
    return d if d.type == "cpu" else torch.device(_DEVICE, _index(d))


def gather(tensors, dim=0, destination=None, *, out=None):
    if out is not None:
        return out.copy_(torch.cat([t.to(out.device) for t in tensors], dim))
    target = _gather_target(destination)
    return torch.cat([t.to(target) for t in tensors], dim)


def _dispatch(name: str, mine, first_tensors):
    original = getattr(comm, name)

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        if _on_tpx(first_tensors(*args, **kwargs)):
            return mine(*args, **kwargs)
        return original(*args, **kwargs)

    wrapper._tpx_patched = True  # type: ignore[attr-defined]
    setattr(comm, name, wrapper)


def register() -> None:
    """Route ``torch.nn.parallel.comm``'s CUDA-only primitives to tpx for tpx tensors (idempotent)."""
    if getattr(comm.scatter, "_tpx_patched", False):
        return
    _dispatch("broadcast_coalesced", broadcast_coalesced, lambda tensors, *a, **k: list(tensors))
    _dispatch("broadcast", broadcast, lambda tensor, *a, **k: [tensor])
    _dispatch("scatter", scatter, lambda tensor, *a, **k: [tensor])
    _dispatch("gather", gather, lambda tensors, *a, **k: list(tensors))
    _dispatch("reduce_add", reduce_add, lambda inputs, *a, **k: list(inputs))  # reduce_add_coalesced calls it
