"""Install the CUDA redirect in the running process (called by the runner's child bootstrap)."""

from __future__ import annotations

import functools
import importlib.abc
import os
import sys

import torch

from tools.redirect.cuda_api import build_cuda_api, patch_nvtx
from tools.redirect.mode import CudaRedirectMode, is_cuda_device
from tools.redirect.patches import install_patches
from tools.redirect.sites import Recorder, RedirectUnsupportedError
import logging

logger = logging.getLogger(__name__)

UNSUPPORTED_MODULES = {
    "triton": "Triton kernels need an NVIDIA/AMD GPU; use the eager PyTorch path (or torch.compile with the target's backend)",
    "pycuda": "PyCUDA drives the NVIDIA driver directly; port the kernel to PyTorch ops",
    "cupy": "CuPy arrays live on NVIDIA GPUs; use torch tensors on the target device",
}

STRATEGY_ENV = "FERRY_REDIRECT_STRATEGY"  # patch (default, fast) | mode (TorchFunctionMode)
_state: dict[str, object] = {}


def _imported_by_library() -> bool:
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith(("<frozen", __file__)):
        frame = frame.f_back
    if frame is None:
        return False
    name = frame.f_globals.get("__name__", "")
    return name == "torch" or name.startswith(("torch.", "tools.", "backend"))


class _UnsupportedImportFinder(importlib.abc.MetaPathFinder):
    """Makes ``import triton`` (etc.) fail with a message naming the importing line."""

    def __init__(self, rec: Recorder, target: str) -> None:
        self.rec, self.target = rec, target

    def find_spec(self, name, path=None, target=None):
        root = name.split(".")[0]
        if root not in UNSUPPORTED_MODULES or _imported_by_library():
            return None  # PyTorch probing for Triton just sees it missing, as without the redirect
        site = self.rec.site_text(skip=2)
        self.rec.record(f"import {root}", mapped_to="unsupported", skip=2)
        raise ModuleNotFoundError(
            f"ferry redirect: {root} cannot run on {self.target} (imported at {site}): {UNSUPPORTED_MODULES[root]}",
            name=name,
        )


def _patch_amp(target: str, rec: Recorder) -> None:
    from torch.amp import autocast_mode, grad_scaler

    orig_autocast = autocast_mode.autocast.__init__

    @functools.wraps(orig_autocast)
    def autocast_init(self, device_type, dtype=None, enabled=True, cache_enabled=None):
        if device_type == "cuda":
            rec.record("autocast(cuda)", skip=3)
            device_type = target
            if dtype == torch.float16 and target == "cpu":
                pass  # CPU autocast supports float16: keep what the code asked for
        return orig_autocast(self, device_type, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)

    autocast_mode.autocast.__init__ = autocast_init

    orig_scaler = grad_scaler.GradScaler.__init__

    @functools.wraps(orig_scaler)
    def scaler_init(self, device="cuda", *args, **kwargs):
        if device == "cuda":
            rec.record("GradScaler(cuda)", skip=3)
            device = target
        return orig_scaler(self, device, *args, **kwargs)

    grad_scaler.GradScaler.__init__ = scaler_init


def _patch_distributed(target: str, rec: Recorder) -> None:
    if not torch.distributed.is_available():
        return
    from torch.distributed import distributed_c10d

    orig = distributed_c10d.init_process_group

    @functools.wraps(orig)
    def init_process_group(backend=None, *args, **kwargs):
        b = kwargs.pop("backend", backend)
        if isinstance(b, str) and "nccl" in b.lower():
            # gloo for CPU tensors; tpx tensors are routed to gloo too (tpx memory is host memory).
            b = "gloo" if target == "cpu" else f"cpu:gloo,{target}:gloo"
            rec.record("init_process_group(nccl)", mapped_to=b, skip=3)
        return orig(b, *args, **kwargs)

    distributed_c10d.init_process_group = init_process_group
    torch.distributed.init_process_group = init_process_group

    from torch.nn.parallel import distributed as ddp_mod

    orig_ddp = ddp_mod.DistributedDataParallel.__init__

    @functools.wraps(orig_ddp)
    def ddp_init(self, module, device_ids=None, output_device=None, *args, **kwargs):
        if device_ids is not None or output_device is not None:
            # CUDA ordinals mean "the GPU of this rank": on the target the module is a
            # single-device module, for which DDP wants no device_ids.
            rec.record("DistributedDataParallel(device_ids)", skip=3)
            device_ids, output_device = None, None
        return orig_ddp(self, module, device_ids, output_device, *args, **kwargs)

    ddp_mod.DistributedDataParallel.__init__ = ddp_init


def _patch_cpp_extension(target: str, rec: Recorder) -> None:
    from torch.utils import cpp_extension

    def refuse(api: str):
        def fail(*args, **kwargs):
            site = rec.site_text(skip=3)
            rec.record(f"cpp_extension.{api}", mapped_to="unsupported", skip=3)
            raise RedirectUnsupportedError(
                f"ferry redirect: cpp_extension.{api} cannot run on {target} (called at {site}): custom CUDA "
                "kernels (.cu) need nvcc and an NVIDIA GPU; use the repository's pure-PyTorch implementation"
            )

        return fail

    def cuda_sources(args, kwargs) -> bool:
        sources = kwargs.get("sources", args[1] if len(args) > 1 else [])
        sources = [sources] if isinstance(sources, str) else list(sources or [])
        return bool(kwargs.get("with_cuda")) or any(str(s).endswith((".cu", ".cuh")) for s in sources)

    orig_load, orig_inline = cpp_extension.load, cpp_extension.load_inline
    fail_load, fail_inline = refuse("load"), refuse("load_inline")

    def load(*args, **kwargs):
        return fail_load(*args, **kwargs) if cuda_sources(args, kwargs) else orig_load(*args, **kwargs)

    def load_inline(*args, **kwargs):
        if kwargs.get("cuda_sources") or (len(args) > 2 and args[2]) or kwargs.get("with_cuda"):
            return fail_inline(*args, **kwargs)
        return orig_inline(*args, **kwargs)

    cpp_extension.CUDAExtension = refuse("CUDAExtension")
    cpp_extension.load, cpp_extension.load_inline = load, load_inline


def _generator_class(target: str, rec: Recorder) -> type:
    """``torch.Generator`` that maps a CUDA device; ``isinstance`` still accepts every
    generator (the default CPU generator included)."""
    orig = torch.Generator
    if getattr(orig, "_ferry_redirect", False):
        return orig

    class _Meta(type(orig)):
        def __instancecheck__(cls, obj):
            return isinstance(obj, orig)

        def __subclasscheck__(cls, sub):
            return issubclass(sub, orig)

    class Generator(orig, metaclass=_Meta):
        _ferry_redirect = True

        def __new__(cls, device="cpu"):
            if is_cuda_device(device, allow_int=True):
                rec.record("torch.Generator(device=)", skip=2)
                device = target
            return orig.__new__(cls, device)

    Generator.__doc__ = orig.__doc__
    return Generator


def install(target: str, log_path: str | None = None, repo_root: str | None = None) -> Recorder:
    """Map CUDA onto ``target`` ("cpu" or "tpx") for the rest of this process. Idempotent."""
    if "recorder" in _state:
        return _state["recorder"]  # type: ignore[return-value]
    if target not in ("cpu", "tpx"):
        raise ValueError(f"redirect target must be 'cpu' or 'tpx', got {target!r}")
    rec = Recorder(log_path, target, repo_root)
    for name, fn in build_cuda_api(target, rec).items():
        setattr(torch.cuda, name, fn)
    patch_nvtx(rec)
    if hasattr(torch.cuda, "amp"):
        torch.cuda.amp.GradScaler  # noqa: B018 - resolve the lazy attribute before patching bases
    _patch_amp(target, rec)
    _patch_distributed(target, rec)
    _patch_cpp_extension(target, rec)

    def module_cuda(self, device=None):
        rec.record("Module.cuda", skip=3)
        return self.to(torch.device(target))

    torch.nn.Module.cuda = module_cuda

    orig_default = torch.set_default_device

    def set_default_device(device):
        if is_cuda_device(device, allow_int=True):
            rec.record("torch.set_default_device", skip=3)
            device = target
        return orig_default(device)

    torch.set_default_device = set_default_device

    orig_load = torch.load

    @functools.wraps(orig_load)
    def load(f, map_location=None, *args, **kwargs):
        if map_location is None:
            # Tensors saved on CUDA come back on the target; CPU ones stay on the CPU.
            map_location = {f"cuda:{i}": target for i in range(16)} | {"cuda": target}
        elif is_cuda_device(map_location, allow_int=True):
            rec.record("torch.load(map_location)", skip=3)
            map_location = torch.device(target)
        elif isinstance(map_location, dict):
            map_location = {k: (target if is_cuda_device(v) else v) for k, v in map_location.items()}
        return orig_load(f, map_location, *args, **kwargs)

    torch.load = load
    torch.Generator = _generator_class(target, rec)
    sys.meta_path.insert(0, _UnsupportedImportFinder(rec, target))
    strategy = os.environ.get(STRATEGY_ENV, "patch")
    if strategy == "mode":
        # Every torch call passes through the mode: also maps torch.device("cuda") objects and
        # device arguments of APIs not in the tables, at a per-op cost (benchmarks/sandbox.py).
        mode = CudaRedirectMode(target, rec)
        mode.__enter__()
        _state["mode"] = mode
    elif strategy == "patch":
        install_patches(target, rec)
    else:
        raise ValueError(f"{STRATEGY_ENV}={strategy!r}: use 'patch' (default) or 'mode'")
    _state.update(recorder=rec, strategy=strategy)
    logger.debug("CUDA redirect installed: target=%s strategy=%s log=%s", target, strategy, log_path)
    return rec


def install_from_env() -> Recorder | None:
    """Install from ``FERRY_REDIRECT_CUDA`` / ``FERRY_REDIRECT_LOG`` / ``FERRY_WORKSPACE``."""
    target = os.environ.get("FERRY_REDIRECT_CUDA")
    if not target:
        return None
    return install(target, os.environ.get("FERRY_REDIRECT_LOG"), os.environ.get("FERRY_WORKSPACE"))
