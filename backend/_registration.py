"""Register tpx with PyTorch: rename PrivateUse1, the ``torch.tpx`` module, generated methods,
the Python kernels, autocast, and the few patches a real out-of-tree device needs.

Cheap by design (``import torch`` runs it through autoload): the C++ extension is loaded here
only when its cache already holds a build; otherwise it is built on first use of the device.
"""

from __future__ import annotations

import functools
import logging

import torch

logger = logging.getLogger(__name__)

_libs: list = []  # keep torch.library.Library objects alive
# The dispatch key (unused by PyTorch and by tensors) through which tpx's C++ kernels reach the
# Python kernels for the cases they leave to Python.
PYTHON_KEY = "PrivateUse3"


_done = False


def register() -> None:
    global _done
    if _done:
        return
    _done = True
    from . import _ext, config, copies, device_module, kernels, streams

    if torch._C._get_privateuse1_backend_name() != "tpx":
        torch.utils.rename_privateuse1_backend("tpx")
    torch._register_device_module("tpx", device_module)
    torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
    )

    config.on_change(kernels._apply_config)
    config.on_change(kernels._invalidate_infos)
    config.on_change(_push_config_to_ext)

    fb = torch.library.Library("_", "IMPL")
    fb.fallback(kernels.fallback, "PrivateUse1")
    # The C++ kernels (tpx_dispatch.cpp) hand their special cases to Python through this spare key
    fb.fallback(kernels.fallback, PYTHON_KEY)
    # ops without a tpx autocast rule run unchanged under torch.autocast("tpx")
    fb.fallback(torch.library.fallthrough_kernel, "AutocastPrivateUse1")
    _libs.append(fb)

    _load_cached_ext()
    # Python kernels for the copies and the direct ops below until the extension is built; with
    # it, C++ ones (and the Python ones behind PYTHON_KEY for the cases they leave to Python)
    py_key = PYTHON_KEY if _ext.is_loaded() else "PrivateUse1"
    lib = torch.library.Library("aten", "IMPL")
    lib.impl("_copy_from", copies.copy_from, py_key)
    lib.impl("_copy_from_and_resize", copies.copy_from_and_resize, py_key)
    # copy_ (a Conjugate/Negative fallthrough) reaches a PrivateUse1 device as _copy_from, which
    # has no such fallthrough: the math-bit fallback then resolves the lazy conj/neg source with
    # clone -> copy_ -> _copy_from -> fallback ... (unbounded recursion, a segfault). tpx's copy
    # kernels honour the bits (CPU aliases keep them), so let these ops through.
    for key in ("Conjugate", "Negative"):
        for name in ("_copy_from", "_copy_from_and_resize"):
            lib.impl(name, torch.library.fallthrough_kernel, key)
    lib.impl("_to_copy", copies.to_copy, py_key)
    # Module.to("tpx") keeps its Parameter objects (``param.data = ...``), as CPU -> CUDA does
    lib.impl("_has_compatible_shallow_copy_type", copies.has_compatible_shallow_copy_type, "PrivateUse1")
    # Tensor.record_stream as CUDA has it (tpx's streams are ordered: nothing to record)
    lib.impl("record_stream", streams.record_stream, "PrivateUse1")
    # Composite ops whose generic decomposition would pick a backend-specific path tpx lacks:
    # (native_layer_norm: otherwise it decomposes into batch_norm math on non-CPU devices and
    # drifts from the CPU result; with a direct kernel its CPU kernel and autograd formula run.)
    direct = ["convolution", "convolution_backward", "_convolution", "native_layer_norm", "native_group_norm"]
    # Structured ops reach a backend without a functional kernel as empty + <op>.out (two
    # dispatches and an out= resize check): give their functional/in-place forms direct kernels.
    direct += [q[len("aten::"):] for q in torch._C._dispatch_get_all_op_names()
               if q.startswith("aten::")
               and torch._C._dispatch_has_kernel_for_dispatch_key(q, "CompositeExplicitAutogradNonFunctional")]
    for name in direct:
        lib.impl(name, _boxed(name), py_key)
    from . import rnn_kernels

    rnn_kernels.register(lib, py_key)  # with the extension, C++ cells (tpx_dispatch.cpp) in front
    rnn_kernels.register_lstm(lib)
    _libs.append(lib)

    from . import autocast

    autocast.register(_libs)
    _patch_printing()
    _patch_grad_scaler()
    _patch_matmul_precision()
    from . import distributed, parallel

    parallel.register()  # nn.DataParallel over tpx devices
    distributed.register()  # c10d backend "tpxgloo"

    # The compute hot path in C++ (tpx_dispatch.cpp) for every op that would reach the Python
    # fallback and for the direct ones above; ops with a Python tpx kernel keep it.
    _ext.on_load(lambda mod: kernels.install_cpp_kernels(mod, direct))
    logger.debug("tpx registered")


def _load_cached_ext() -> None:
    from . import _ext

    if _ext.cached_library() is not None:
        try:
            _ext.get(build=False)
        except Exception as exc:  # a stale/corrupt cache: rebuilt on first use
            logger.warning("tpx: could not load the cached C++ extension (%s); it will be rebuilt on first use", exc)


def _boxed(name: str):
    """A direct kernel for ``name`` ("op" or "op.overload") that runs it on the CPU."""
    from . import kernels

    run = kernels.run_info
    cell: list = []

    def kernel(*args, **kwargs):
        try:
            return run(cell[0], args, kwargs)
        except IndexError:
            if cell:
                raise
        base, _, overload = name.partition(".")
        cell.append(kernels._info(getattr(getattr(torch.ops.aten, base), overload or "default")))
        return run(cell[0], args, kwargs)

    return kernel


def _push_config_to_ext(cfg) -> None:
    from . import _ext

    def push(mod) -> None:
        mod.set_capacity(cfg.memory_capacity)  # each device has this capacity of its own
        mod.set_float64_allowed(cfg.allow_float64)
        mod.set_rng_host_stream(cfg.rng == "host")
        mod.set_device_count(cfg.visible_count, cfg.device_hint())

    _ext.on_load(push)


def _patch_printing() -> None:
    """Format tpx tensors from a zero-copy CPU view (formatting uses float64 and masked_select,
    which tpx refuses or counts as fallbacks); the device suffix still says tpx."""
    import torch._tensor_str as ts

    if getattr(ts._tensor_str, "_tpx_patched", False):
        return
    original = ts._tensor_str

    @functools.wraps(original)
    def _tensor_str(self, indent):
        if self.device.type == "tpx":
            from . import kernels, stats

            stats.record_sync("print")
            self = kernels._to_cpu(self.detach())
        return original(self, indent)

    _tensor_str._tpx_patched = True
    ts._tensor_str = _tensor_str


def _patch_grad_scaler() -> None:
    """GradScaler computes its inverse scale in float64 on the device; allow exactly that."""
    from torch.amp import grad_scaler

    cls = grad_scaler.GradScaler
    if getattr(cls.unscale_, "_tpx_patched", False):
        return
    original = cls.unscale_

    @functools.wraps(original)
    def unscale_(self, optimizer):
        if getattr(self, "_device", None) == "tpx":
            from .amp import float64_scope

            with float64_scope():
                return original(self, optimizer)
        return original(self, optimizer)

    unscale_._tpx_patched = True
    cls.unscale_ = unscale_


def _patch_matmul_precision() -> None:
    """Remember when the user explicitly asks torch for "highest" fp32 matmul precision."""
    from . import kernels

    if getattr(torch.set_float32_matmul_precision, "_tpx_patched", False):
        return
    original = torch.set_float32_matmul_precision

    @functools.wraps(original)
    def set_float32_matmul_precision(precision: str) -> None:
        original(precision)
        kernels.S.torch_precision_explicit_highest = precision == "highest"
        kernels._refresh_matmul()

    set_float32_matmul_precision._tpx_patched = True
    torch.set_float32_matmul_precision = set_float32_matmul_precision
