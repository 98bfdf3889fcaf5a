"""Copies between tpx and the host: ``_copy_from``, ``_copy_from_and_resize``, ``_to_copy``,
and ``_has_compatible_shallow_copy_type`` (may ``param.data = other`` swap a tensor in place).

These are the kernels that move bytes host<->device, so they are where transfers and
device-to-host syncs are counted, and where casting to float64 on tpx is refused. Once the C++
extension is loaded, ``tpx_dispatch.cpp`` runs the same rules (and counts) in C++ and these
Python kernels serve only a process that had to build the extension.
"""

from __future__ import annotations

import torch

from . import kernels, stats

_perf_ns = kernels._perf_ns


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def copy_from(src: torch.Tensor, dst: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
    t0 = _perf_ns()
    src_tpx = src.device.type == "tpx"
    dst_tpx = dst.device.type == "tpx"
    if dst_tpx and dst.dtype in kernels._F64 and not kernels.f64_allowed():
        raise kernels.float64_error("aten::copy_")
    csrc = kernels._to_cpu(src) if src_tpx else src
    cdst = kernels._to_cpu(dst) if dst_tpx else dst
    if not csrc.device == cdst.device == torch.device("cpu"):
        raise RuntimeError(f"tpx: cannot copy from {src.device} to {dst.device}")
    cdst.copy_(csrc)
    if src_tpx and not dst_tpx:
        stats.record_d2h(_nbytes(dst))
        if not non_blocking:
            stats.record_sync("copy_to_host")
    elif dst_tpx and not src_tpx:
        stats.record_h2d(_nbytes(dst))
    stats.record_op("aten::copy_", _perf_ns() - t0)
    return dst


def copy_from_and_resize(src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
    if dst.shape != src.shape:
        dst.resize_(src.shape)
    return copy_from(src, dst)


def to_copy(
    x: torch.Tensor,
    *,
    dtype=None,
    layout=None,
    device=None,
    pin_memory=None,
    non_blocking=False,
    memory_format=None,
):
    """``Tensor.to`` / ``.cpu()`` / ``.double()`` for a tpx tensor."""
    t0 = _perf_ns()
    target = torch.device(device) if device is not None else x.device
    dtype = dtype if dtype is not None else x.dtype
    if target.type == "tpx" and dtype in kernels._F64 and not kernels.f64_allowed():
        raise kernels.float64_error(f"aten::_to_copy to {dtype}")
    if layout not in (None, torch.strided):
        raise RuntimeError(f"tpx: only strided tensors are supported, got layout={layout}")
    cx = kernels._to_cpu(x)
    mf = memory_format if memory_format is not None else torch.preserve_format
    out = torch.empty_like(cx, dtype=dtype, memory_format=mf, pin_memory=bool(pin_memory) and target.type == "cpu")
    out.copy_(cx)
    if target.type == "cpu":
        stats.record_d2h(_nbytes(out))
        if not non_blocking:
            stats.record_sync("cpu")
        stats.record_op("aten::_to_copy", _perf_ns() - t0)
        return out
    if target.type != "tpx":
        raise RuntimeError(f"tpx: cannot copy a tpx tensor to {target}; move it to the CPU first")
    res = kernels._from_cpu(out, target.index if target.index is not None else -1)
    if x.device.type == "cpu":
        stats.record_h2d(_nbytes(out))
    stats.record_op("aten::_to_copy", _perf_ns() - t0)
    return res


# Device types whose dense tensors share the plain TensorImpl layout. PyTorch's own rule
# (TensorImpl::has_compatible_shallow_copy_type) lists CPU, CUDA, MPS, HIP, XPU, HPU and MTIA but
# not PrivateUse1, and asks a PrivateUse1 backend to override the operator (as OpenReg does).
_DENSE_DEVICE_TYPES = frozenset({"cpu", "cuda", "mps", "hip", "xpu", "hpu", "mtia", "tpx"})


def _dense(t: torch.Tensor) -> bool:
    return (t.layout == torch.strided and not t.is_quantized and not t.is_nested
            and t.device.type in _DENSE_DEVICE_TYPES)


def has_compatible_shallow_copy_type(self: torch.Tensor, from_: torch.Tensor) -> bool:
    """``aten::_has_compatible_shallow_copy_type`` for tpx: dense tpx and dense CPU (or another dense
    device) tensors are compatible, as CPU and CUDA are. ``Module._apply`` then moves a parameter
    with ``param.data = moved`` and keeps the Parameter object, so an optimizer built before
    ``model.to("tpx")`` holds the parameters it trains. Anything else: the same dispatch keys."""
    if _dense(self) and _dense(from_):
        return True
    return repr(torch._C._dispatch_keys(self)) == repr(torch._C._dispatch_keys(from_))
