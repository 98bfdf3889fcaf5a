"""tpx compute kernels: one boxed PrivateUse1 fallback that runs the CPU kernel on zero-copy CPU
aliases of the inputs, plus direct Python registrations for copies/transfers and hot ops.

Per call: tpx tensors become CPU aliases (``bridge.to_cpu``), the CPU kernel runs, CPU results
become tpx tensors over the same memory (``bridge.from_cpu``); in-place and ``out=`` results are
the caller's own tpx tensors (resized if the CPU kernel had to grow them). Along the way the
chip's rules apply: no float64 results, data-dependent-shape ops as counted CPU fallbacks (or
NotImplementedError in strict mode), bf16-input matmuls, mixed-device errors, statistics.
"""

from __future__ import annotations

import logging
import time
import warnings
from typing import ClassVar

import torch

from . import _ext, config, rng, stats

logger = logging.getLogger(__name__)
Tensor = torch.Tensor
_F64 = (torch.float64, torch.complex128)
_perf_ns = time.perf_counter_ns
_profiler_enabled = torch._C._autograd._profiler_enabled
_CPU = torch.device("cpu")

# Ops that may legitimately mix tpx tensors with non-scalar CPU tensors (as CUDA allows).
_MIXED_OK = frozenset({"index", "index_put_", "_index_put_impl_", "index_put", "copy_", "_copy_from",
                       "_copy_from_and_resize", "_to_copy", "set_"})

# matmul-family ops and the positions of the operands rounded to bf16 (never the bias/"self" of
# the add* forms). matmul and linear are composite and reach tpx as mm/addmm/bmm.
MATMUL_OPERANDS: dict[str, tuple[int, ...]] = {
    "mm": (0, 1), "bmm": (0, 1), "mv": (0, 1), "dot": (0, 1), "vdot": (0, 1),
    "addmm": (1, 2), "addmv": (1, 2), "baddbmm": (1, 2), "addbmm": (1, 2),
    "matmul": (0, 1), "linear": (0, 1), "convolution": (0, 1), "_convolution": (0, 1),
    # attention runs the CPU's kernel choice (see tpx_ext.cpp sdp_choice); the math choice
    # reaches tpx as bmm, the flash one as these ops (q, k, v; and grad_out in the backward)
    "_scaled_dot_product_flash_attention_for_cpu": (0, 1, 2),
    "_scaled_dot_product_flash_attention_for_cpu_backward": (0, 1, 2, 3),
}


class TpxFallbackWarning(UserWarning):
    """A data-dependent-shape op ran as a CPU fallback on tpx."""


class _WarnedSet(set):
    """The fallback ops already warned about; the C++ kernels run those themselves (without
    Python) once warned, so every change is pushed to them."""

    def add(self, name) -> None:
        super().add(name)
        _push_fallback_rules()

    def discard(self, name) -> None:
        super().discard(name)
        _push_fallback_rules()

    def remove(self, name) -> None:
        super().remove(name)
        _push_fallback_rules()

    def clear(self) -> None:
        super().clear()
        _push_fallback_rules()


class _State:
    allow_f64 = False
    f64_depth = 0  # >0 inside backend.float64_scope() (GradScaler internals)
    strict = False
    fallback_ops: frozenset[str] = frozenset()
    warn_fallback = True
    precision_mode = "auto"
    torch_precision_explicit_highest = False
    matmul_bf16 = True
    warned: ClassVar[set[str]] = _WarnedSet()  # the class is the state (S), never instantiated


S = _State


def _refresh_matmul() -> None:
    mode = S.precision_mode
    if mode == "highest":
        S.matmul_bf16 = False
    elif mode == "bf16":
        S.matmul_bf16 = True
    else:  # auto: bf16 like a TPU unless torch was explicitly asked for "highest"
        S.matmul_bf16 = not (
            S.torch_precision_explicit_highest and torch.get_float32_matmul_precision() == "highest"
        )
    if _cpp_kernels and S.matmul_bf16 != _pushed_bf16[0]:
        _pushed_bf16[0] = S.matmul_bf16
        _ext.get().set_matmul_bf16(S.matmul_bf16)


def _apply_config(cfg: config.TpxConfig) -> None:
    S.allow_f64 = cfg.allow_float64
    S.strict = cfg.strict
    S.fallback_ops = cfg.fallback_ops
    S.warn_fallback = cfg.warn_fallback
    S.precision_mode = cfg.matmul_precision
    _refresh_matmul()
    if _cpp_kernels:
        _push_to_cpp(_ext.get())


def _push_to_cpp(mod) -> None:
    """The settings the C++ kernels (tpx_dispatch.cpp) read."""
    _pushed_bf16[0] = S.matmul_bf16
    mod.set_matmul_bf16(S.matmul_bf16)
    mod.set_fallback_ops(sorted(S.fallback_ops))
    mod.set_fallback_rules(S.strict, S.warn_fallback, sorted(S.warned))


def _push_fallback_rules() -> None:
    """A fallback op runs in C++ once Python has warned about it (the first call, with the
    warning, and strict mode's error stay Python's)."""
    if _cpp_kernels:
        _ext.get().set_fallback_rules(S.strict, S.warn_fallback, sorted(S.warned))


def f64_allowed() -> bool:
    return S.allow_f64 or S.f64_depth > 0


# ---------------------------------------------------------------- bridge binding (lazy ext load)
def _lazy_to_cpu(t):
    _bind()
    return _to_cpu(t)


def _lazy_from_cpu(t, index=-1):
    _bind()
    return _from_cpu(t, index)


_to_cpu = _lazy_to_cpu
_from_cpu = _lazy_from_cpu
_unwrap = None
_wrap_ext = None


def _bind() -> None:
    global _to_cpu, _from_cpu, _unwrap, _wrap_ext
    mod = _ext.get()
    _to_cpu, _from_cpu, _unwrap, _wrap_ext = mod.to_cpu, mod.from_cpu, mod.unwrap, mod.wrap


# ---------------------------------------------------------------- errors
def float64_error(opname: str) -> TypeError:
    return TypeError(
        f"tpx does not support torch.float64 ({opname}): the device has no float64 units. "
        "Use torch.float32 instead (e.g. .float(), dtype=torch.float32, or "
        "torch.set_default_dtype(torch.float32)), or keep this computation on the CPU."
    )


def _mixed_error(dev) -> RuntimeError:
    return RuntimeError(
        f"Expected all tensors to be on the same device, but found at least two devices, {dev} and cpu!"
    )


# ---------------------------------------------------------------- per-op info cache
class _OpInfo:
    __slots__ = ("call", "fallback", "full", "matmul", "mixed_ok", "mutable_out", "name", "rng", "sync",
                 "tensor_kw", "tensor_pos")

    def __init__(self, op) -> None:
        self.call = getattr(op, "_op", op)  # the C++ builtin: skips OpOverload.__call__
        schema = op._schema
        base = schema.name.split("::", 1)[-1]
        self.name = base
        self.full = f"aten::{base}" if schema.name.startswith("aten::") else schema.name
        self.fallback = base in S.fallback_ops
        # out= ops (the CPU kernel may resize the output) and in-place view ops (squeeze_,
        # transpose_, as_strided_...: they change the alias's metadata): copy the result's
        # metadata back to the tpx tensor afterwards.
        self.mutable_out = torch.Tag.inplace_view in getattr(op, "tags", ()) or any(
            a.alias_info is not None and a.alias_info.is_write and a.kwarg_only for a in schema.arguments
        )
        self.matmul = MATMUL_OPERANDS.get(base)
        self.sync = "item" if base in ("_local_scalar_dense", "item") else None
        self.mixed_ok = base in _MIXED_OK
        # Tensor parameters: a Python number found there is a wrapped-number tensor that the
        # Python boxing turned into a number (ATen's Scalar overloads call the Tensor overload
        # with one); it must become a wrapped-number tensor again before the CPU call.
        is_tensor = [str(a.type) in ("Tensor", "Optional[Tensor]") for a in schema.arguments]
        self.tensor_pos = tuple(
            i for i, a in enumerate(schema.arguments) if is_tensor[i] and not a.kwarg_only
        )
        self.tensor_kw = tuple(a.name for i, a in enumerate(schema.arguments) if is_tensor[i] and a.kwarg_only)
        # random ops draw from a tpx generator (backend/rng.py): where their Generator argument is,
        # (position, kwarg name); (-1, None) for the ops that use the CPU default generator themselves
        self.rng: tuple[int, str | None] | None = (-1, None) if base in rng.HOST_RNG_OPS else None
        for i, a in enumerate(schema.arguments):
            if str(a.type) in ("Generator", "Optional[Generator]"):
                self.rng = (-1 if a.kwarg_only else i, a.name)


_infos: dict = {}


def _info(op) -> _OpInfo:
    info = _infos.get(id(op))
    if info is None:
        info = _infos[id(op)] = _OpInfo(op)
        _keep_alive.append(op)
    return info


_keep_alive: list = []


def _invalidate_infos(_cfg=None) -> None:
    """Re-evaluate config-dependent per-op facts (infos are also cached inside direct kernels)."""
    for info in _infos.values():
        info.fallback = info.name in S.fallback_ops


# ---------------------------------------------------------------- the generic CPU runner
def _round_bf16(c):
    if isinstance(c, Tensor) and c.dtype is torch.float32:
        return c.to(torch.bfloat16).to(torch.float32)
    return c


def run_on_cpu(op, args, kwargs):
    """Run ``op`` on CPU aliases of its tpx inputs and return tpx results."""
    return run_info(_infos.get(id(op)) or _info(op), args, kwargs)


_stat_ops = stats.ops


def run_info(info: _OpInfo, args, kwargs):
    t0 = _perf_ns()
    if info.fallback:
        _fallback_gate(info)
    if _unwrap is None:
        _bind()
    cargs, ckwargs, pairs, dev, cpu_nonscalar, _other = _unwrap(args, kwargs)
    gen = cpu_gen = None
    if info.rng is not None:
        gen, cpu_gen = _take_generator(info.rng, cargs, ckwargs, dev)
    if info.tensor_pos or info.tensor_kw:
        _rewrap_numbers(info, cargs, ckwargs)
    if cpu_nonscalar and dev != -2 and not info.mixed_ok:
        raise _mixed_error(torch.device("tpx", dev if dev >= 0 else 0))
    if info.matmul is not None and S.matmul_bf16:
        for i in info.matmul:
            if i < len(cargs):
                cargs[i] = _round_bf16(cargs[i])
    if _profiler_enabled():
        with torch.profiler.record_function(
            f"tpx::{info.name}" + ("[cpu-fallback]" if info.fallback else "")
        ):
            out = _call(info, gen, cpu_gen, cargs, ckwargs) if gen is not None else info.call(*cargs, **ckwargs)
    else:
        out = _call(info, gen, cpu_gen, cargs, ckwargs) if gen is not None else info.call(*cargs, **ckwargs)
    if info.mutable_out:
        _sync_out_args(pairs)
    res, f64 = _wrap_ext(out, pairs, S.allow_f64 or S.f64_depth > 0, dev if dev >= 0 else -1)
    if f64:
        raise float64_error(info.full)
    if info.sync is not None:
        stats.record_sync(info.sync)
    entry = _stat_ops.get(info.full)
    if entry is None or info.fallback:
        stats.record_op(info.full, _perf_ns() - t0, info.fallback)
    else:
        entry[0] += 1
        entry[1] += _perf_ns() - t0
    return res


_NUMBER_TYPES = (int, float, bool, complex)


def _rewrap_numbers(info: _OpInfo, cargs: list, ckwargs: dict) -> None:
    n = len(cargs)
    for i in info.tensor_pos:
        if i < n and type(cargs[i]) in _NUMBER_TYPES:
            cargs[i] = _ext.get().wrapped_number(cargs[i])
    for k in info.tensor_kw:
        if type(ckwargs.get(k)) in _NUMBER_TYPES:
            ckwargs[k] = _ext.get().wrapped_number(ckwargs[k])


def _take_generator(where: tuple[int, str | None], cargs: list, ckwargs: dict, dev: int):
    """A random op: the tpx generator it draws from, and the CPU generator it runs on instead
    (put in place of the generator argument; None: the CPU default generator)."""
    pos, kw = where
    positional = 0 <= pos < len(cargs)
    arg = cargs[pos] if positional else ckwargs.get(kw) if kw is not None else None
    gen = rng.generator_for(arg, dev)
    if gen is None:  # a CPU generator: the CPU kernel takes it as it is
        return None, None
    cpu_gen = rng.acquire(gen)
    if positional:
        cargs[pos] = cpu_gen
    elif kw is not None and (kw in ckwargs or cpu_gen is not None):
        ckwargs[kw] = cpu_gen  # (a trailing positional left out is passed by name)
    return gen, cpu_gen


def _call(info: _OpInfo, gen, cpu_gen, cargs, ckwargs):
    if info.rng == (-1, None):  # draws from the CPU default generator itself
        with rng.host_stream(cpu_gen), rng.host_draw(cpu_gen):
            out = info.call(*cargs, **ckwargs)
    else:
        with rng.host_draw(cpu_gen):
            out = info.call(*cargs, **ckwargs)
    rng.advance(gen, out)
    return out


def _fallback_gate(info: _OpInfo) -> None:
    if S.strict:
        raise NotImplementedError(
            f"tpx: {info.full} is not supported on the tpx device (its output shape depends on the "
            "data, which needs a device-to-host sync). Rewrite without it (e.g. use a mask and "
            "torch.where, or a fixed-size variant), run that step on the CPU explicitly, or turn off "
            "strict mode (backend.configure(strict=False) / TPX_STRICT=0) to run it as a CPU fallback."
        )
    stats.record_sync(info.name)
    if S.warn_fallback and info.name not in S.warned:
        S.warned.add(info.name)
        warnings.warn(
            f"tpx: {info.full} has a data-dependent output shape and is not native on tpx; it runs "
            "as a CPU fallback with a device-to-host sync (counted in torch.tpx.op_stats()). "
            "backend.configure(strict=True) makes this an error.",
            TpxFallbackWarning,
            stacklevel=4,
        )


def _sync_out_args(pairs) -> None:
    """After an out= op: if the CPU kernel resized an output alias, resize the tpx tensor."""
    for c, t in pairs:
        if c.data_ptr() == t.data_ptr() and c.shape == t.shape and c.stride() == t.stride():
            continue
        if c.untyped_storage().data_ptr() == t.untyped_storage().data_ptr():
            t.set_(t.untyped_storage(), c.storage_offset(), c.shape, c.stride())
        else:  # the CPU kernel had to move the alias to bigger memory
            t.resize_(c.shape)
            if c.stride() != t.stride():
                t.set_(t.untyped_storage(), t.storage_offset(), c.shape, c.stride())
            _to_cpu(t).copy_(c)


def fallback(op, *args, **kwargs):
    """The boxed PrivateUse1 fallback registered for every aten op without a tpx kernel."""
    return run_on_cpu(op, args, kwargs)


# ---------------------------------------------------------------- the C++ kernels
_cpp_kernels = False
_pushed_bf16 = [None]  # the matmul rule the C++ kernels were last given


def install_cpp_kernels(mod, direct: list[str]) -> None:
    """Register the C++ kernels of ``tpx_dispatch.cpp`` (once, when the extension loads)."""
    global _cpp_kernels
    if _cpp_kernels:
        return
    _push_to_cpp(mod)
    n = mod.install_kernels(direct)
    _cpp_kernels = True
    logger.debug("tpx: %d C++ kernels registered", n)
