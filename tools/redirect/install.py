"""Install the CUDA redirect in the running process (called by the runner's child bootstrap)."""

from __future__ import annotations

import functools
import importlib.abc
import logging
import os
import sys
from typing import TYPE_CHECKING, Any, NoReturn, TypedDict

import torch

from ..guest import is_own_module
from . import accelerator_api, amp_policy, dynamo_rules
from .cuda_api import build_cuda_api, patch_nvtx
from .legacy import legacy_types, patch_legacy_type_checks
from .methods import patch_methods
from .mode import CudaRedirectMode, is_cuda_device
from .patches import install_patches, redirected_to
from .sites import RedirectUnsupportedError, SiteCounter
from .tables import FACTORIES, NVTX_FUNCTIONS

if TYPE_CHECKING:  # typing only: the sandboxed child imports no more than it needs
    from collections.abc import Callable, Sequence
    from importlib.machinery import ModuleSpec
    from types import FrameType, ModuleType

logger = logging.getLogger(__name__)

UNSUPPORTED_MODULES = {
    "triton": ("Triton kernels need an NVIDIA/AMD GPU; use the eager PyTorch path (or torch.compile with the "
               "target's backend)"),
    "pycuda": "PyCUDA drives the NVIDIA driver directly; port the kernel to PyTorch ops",
    "cupy": "CuPy arrays live on NVIDIA GPUs; use torch tensors on the target device",
}

STRATEGY_ENV = "FERRY_REDIRECT_STRATEGY"  # patch (default, fast) | mode (TorchFunctionMode)
AUTOCAST_ENV = "FERRY_REDIRECT_AUTOCAST"  # on (default) | off: CUDA autocast disabled (the fp32 golden run)


class _Installed(TypedDict, total=False):
    """What this process installed (once)."""

    recorder: SiteCounter
    strategy: str
    mode: CudaRedirectMode


_state: _Installed = {}


def _imported_by_library() -> bool:
    frame: FrameType | None = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith(("<frozen", __file__)):
        frame = frame.f_back
    if frame is None:
        return False
    name: str = frame.f_globals.get("__name__", "")
    return name == "torch" or name.startswith("torch.") or is_own_module(name)


class _UnsupportedImportFinder(importlib.abc.MetaPathFinder):
    """Makes ``import triton`` (etc.) fail with a message naming the importing line."""

    def __init__(self, rec: SiteCounter, target: str) -> None:
        self.rec, self.target = rec, target

    def find_spec(self, name: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        root = name.split(".")[0]
        if root not in UNSUPPORTED_MODULES or _imported_by_library():
            return None  # PyTorch probing for Triton just sees it missing, as without the redirect
        site = self.rec.site_text(skip=2)
        self.rec.record(f"import {root}", mapped_to="unsupported", skip=2)
        raise ModuleNotFoundError(
            f"ferry redirect: {root} cannot run on {self.target} (imported at {site}): {UNSUPPORTED_MODULES[root]}",
            name=name,
        )


def autocast_disabled() -> bool:
    """Whether this run is the fp32 "golden" run (``FERRY_REDIRECT_AUTOCAST=off``): every CUDA
    autocast region runs with autocast off, so the program computes in float32 on the CPU."""
    value = os.environ.get(AUTOCAST_ENV, "")
    if value not in ("", "on", "off"):
        raise ValueError(f"{AUTOCAST_ENV}={value!r}: use 'on' (default) or 'off' (the fp32 golden run)")
    return value == "off"


def _patch_amp(target: str, rec: SiteCounter) -> None:
    from torch.amp import autocast_mode, grad_scaler

    orig_autocast = autocast_mode.autocast.__init__
    disabled = autocast_disabled()

    @functools.wraps(orig_autocast)
    def autocast_init(self: autocast_mode.autocast, device_type: str, dtype: torch.dtype | None = None,
                      enabled: bool = True, cache_enabled: bool | None = None) -> None:
        if device_type == "cuda":
            device_type = target
            if disabled:
                rec.record("autocast(cuda) disabled (fp32 golden run)", skip=3)
                enabled = False
            else:
                rec.record("autocast(cuda)", skip=3)
                self._ferry_from_cuda = True  # type: ignore[attr-defined]  # read by the CPU cast policy
                if target == "cpu":
                    amp_policy.install()  # CUDA's cast policy in the regions mapped to the CPU (once)
        orig_autocast(self, device_type, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)

    # the redirect replaces torch's own methods on purpose (the sandboxed child's monkeypatching)
    autocast_mode.autocast.__init__ = autocast_init  # type: ignore[method-assign]
    if target == "cpu":
        _track_redirected_regions(autocast_mode.autocast)
        _keep_lstm_runnable(rec)

    orig_scaler = grad_scaler.GradScaler.__init__

    @functools.wraps(orig_scaler)
    def scaler_init(self: grad_scaler.GradScaler, device: str = "cuda", *args: Any, **kwargs: Any) -> None:
        if device == "cuda":
            rec.record("GradScaler(cuda)", skip=3)
            device = target
        orig_scaler(self, device, *args, **kwargs)

    # torch's own method, replaced on purpose (the child's monkeypatching)
    grad_scaler.GradScaler.__init__ = scaler_init  # type: ignore[method-assign]


def _to_float32(value: Any) -> Any:
    """Floating tensors (also inside tuples and PackedSequences) as float32."""
    if isinstance(value, torch.nn.utils.rnn.PackedSequence):
        return value.float() if value.data.is_floating_point() else value
    if isinstance(value, torch.Tensor):
        return value.float() if value.is_floating_point() else value
    if isinstance(value, tuple):
        return tuple(_to_float32(v) for v in value)
    return value


def _track_redirected_regions(autocast_cls: type[Any]) -> None:
    """Entering and leaving an autocast the program opened for CUDA marks the redirected region
    (per thread) in which CUDA's cast policy applies on the CPU (``amp_policy``)."""
    orig_enter, orig_exit = autocast_cls.__enter__, autocast_cls.__exit__

    def enter(self: Any) -> Any:
        result = orig_enter(self)
        if getattr(self, "_ferry_from_cuda", False):
            amp_policy.enter_region()
        return result

    def exit_(self: Any, *exc: Any) -> Any:
        if getattr(self, "_ferry_from_cuda", False):
            amp_policy.exit_region()
        return orig_exit(self, *exc)

    autocast_cls.__enter__, autocast_cls.__exit__ = enter, exit_


def _keep_lstm_runnable(rec: SiteCounter) -> None:
    """``nn.LSTM`` under a CUDA autocast mapped to the CPU runs in float32.

    CPU autocast sends LSTM to oneDNN in float16/bfloat16, which has no such primitive ("could
    not create a primitive descriptor for the LSTM forward propagation primitive"), so the
    original could not run. Inside a redirected autocast the LSTM runs with autocast off on
    float32 inputs and returns float32, as CPU autocast does for GRU and LSTMCell.
    """
    orig_forward = torch.nn.LSTM.forward

    @functools.wraps(orig_forward)
    def forward(self: torch.nn.LSTM, input: Any, hx: Any = None) -> Any:
        if not amp_policy.in_region():
            return orig_forward(self, input, hx)
        rec.record("autocast(cuda): nn.LSTM in float32", skip=3)
        with torch.autocast("cpu", enabled=False):
            return orig_forward(self, _to_float32(input), _to_float32(hx))

    # torch's own method, replaced on purpose (the child's monkeypatching)
    torch.nn.LSTM.forward = forward  # type: ignore[method-assign]


def _patch_distributed(target: str, rec: SiteCounter) -> None:
    if not torch.distributed.is_available():
        return
    from torch.distributed import distributed_c10d

    orig = distributed_c10d.init_process_group

    @functools.wraps(orig)
    def init_process_group(backend: str | None = None, *args: Any, **kwargs: Any) -> None:
        b = kwargs.pop("backend", backend)
        device_id = kwargs.get("device_id")
        if device_id is not None and is_cuda_device(device_id, allow_int=True):
            # The GPU this rank binds to: the CPU takes no device_id (gloo runs unbound), tpx its own index.
            kwargs["device_id"] = None if target == "cpu" else torch.device(target, _index(device_id))
            rec.record("init_process_group(device_id)", mapped_to=str(kwargs["device_id"]), skip=3)
            if b is None:
                b = "cuda:nccl"  # what PyTorch picks for a CUDA device_id; mapped below
        if isinstance(b, str) and "nccl" in b.lower():
            # gloo for CPU tensors; the target's own collective backend for its tensors
            b = "gloo" if target == "cpu" else (
                f"cpu:gloo,{target}:{torch.distributed.Backend.default_device_backend_map.get(target, 'gloo')}")
            rec.record("init_process_group(nccl)", mapped_to=b, skip=3)
        orig(b, *args, **kwargs)

    distributed_c10d.init_process_group = init_process_group
    torch.distributed.init_process_group = init_process_group
    _patch_device_mesh(target, rec)

    from torch.nn.parallel import distributed as ddp_mod

    orig_ddp = ddp_mod.DistributedDataParallel.__init__

    @functools.wraps(orig_ddp)
    def ddp_init(self: ddp_mod.DistributedDataParallel, module: torch.nn.Module, device_ids: object = None,
                 output_device: object = None, *args: Any, **kwargs: Any) -> None:
        if device_ids is not None or output_device is not None:
            # CUDA ordinals mean "the GPU of this rank": on the target the module is a
            # single-device module, for which DDP wants no device_ids.
            rec.record("DistributedDataParallel(device_ids)", skip=3)
            device_ids, output_device = None, None
        orig_ddp(self, module, device_ids, output_device, *args, **kwargs)

    # torch's own method, replaced on purpose (the child's monkeypatching)
    ddp_mod.DistributedDataParallel.__init__ = ddp_init  # type: ignore[method-assign]


def _patch_device_mesh(target: str, rec: SiteCounter) -> None:
    """``init_device_mesh("cuda", shape)`` (positional or ``device_type=``): a mesh of the target's
    devices, as ``Module.cuda()`` puts the parameters there (FSDP2 and DTensor check the two agree)."""
    from torch.distributed import device_mesh

    orig = device_mesh.init_device_mesh

    @functools.wraps(orig)
    def init_device_mesh(*args: Any, **kwargs: Any) -> Any:
        if args and is_cuda_device(args[0]):
            args = (target, *args[1:])
            rec.record("init_device_mesh(cuda)", mapped_to=target, skip=3)
        elif "device_type" in kwargs and is_cuda_device(kwargs["device_type"]):
            kwargs["device_type"] = target
            rec.record("init_device_mesh(cuda)", mapped_to=target, skip=3)
        return orig(*args, **kwargs)

    device_mesh.init_device_mesh = init_device_mesh
    if getattr(torch.distributed, "init_device_mesh", None) is orig:
        torch.distributed.init_device_mesh = init_device_mesh  # type: ignore[attr-defined]


def _index(device: object) -> int:
    """The ordinal of a CUDA device given as an int, "cuda:N" or a torch.device (0 without one)."""
    if isinstance(device, int):
        return device
    index = torch.device(device).index if isinstance(device, str) else getattr(device, "index", None)
    return 0 if index is None else int(index)


def _patch_module_to(target: str, rec: SiteCounter) -> None:
    """``Module.to(local_rank)`` / ``Module.to("cuda:1")`` / ``Module.to(device=rank)``: an integer is a CUDA
    ordinal, which PyTorch cannot parse without an accelerator ("Cannot access accelerator device when none
    is available"); the module moves to the target as ``Module.cuda(rank)`` does."""
    # torch's own method, replaced on purpose (the child's monkeypatching)
    torch.nn.Module.to = redirected_to(  # type: ignore[method-assign]
        torch.nn.Module.to, torch.device(target), rec, "Module.to")


def _patch_cpp_extension(target: str, rec: SiteCounter) -> None:
    try:
        from torch.utils import cpp_extension
    except ImportError:  # e.g. no setuptools in the user's venv: their own import of it fails the same way
        return

    def refuse(api: str) -> Callable[..., NoReturn]:
        def fail(*args: object, **kwargs: object) -> NoReturn:
            site = rec.site_text(skip=3)
            rec.record(f"cpp_extension.{api}", mapped_to="unsupported", skip=3)
            raise RedirectUnsupportedError(
                f"ferry redirect: cpp_extension.{api} cannot run on {target} (called at {site}): custom CUDA "
                "kernels (.cu) need nvcc and an NVIDIA GPU; use the repository's pure-PyTorch implementation"
            )

        return fail

    def cuda_sources(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        sources = kwargs.get("sources", args[1] if len(args) > 1 else [])
        sources = [sources] if isinstance(sources, str) else list(sources or [])
        return bool(kwargs.get("with_cuda")) or any(str(s).endswith((".cu", ".cuh")) for s in sources)

    orig_load: Callable[..., Any] = cpp_extension.load
    orig_inline: Callable[..., Any] = cpp_extension.load_inline  # untyped in torch
    fail_load, fail_inline = refuse("load"), refuse("load_inline")

    def load(*args: Any, **kwargs: Any) -> Any:
        return fail_load(*args, **kwargs) if cuda_sources(args, kwargs) else orig_load(*args, **kwargs)

    def load_inline(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("cuda_sources") or (len(args) > 2 and args[2]) or kwargs.get("with_cuda"):
            return fail_inline(*args, **kwargs)
        return orig_inline(*args, **kwargs)

    cpp_extension.CUDAExtension = refuse("CUDAExtension")
    cpp_extension.load, cpp_extension.load_inline = load, load_inline


def _generator_class(target: str, rec: SiteCounter) -> type[torch.Generator]:
    """``torch.Generator`` that maps a CUDA device; ``isinstance`` still accepts every
    generator (the default CPU generator included)."""
    orig = torch.Generator
    if getattr(orig, "_ferry_redirect", False):
        return orig
    # A subclass whose metaclass derives from torch.Generator's own (a C type): the checker cannot
    # follow a base class computed at run time.
    meta: Any = type(orig)

    class _Meta(meta):  # type: ignore[misc]
        def __instancecheck__(cls, obj: object) -> bool:
            return isinstance(obj, orig)

        def __subclasscheck__(cls, sub: type) -> bool:
            return issubclass(sub, orig)

    class Generator(torch.Generator, metaclass=_Meta):  # orig: torch's own class, not yet replaced
        _ferry_redirect = True

        def __new__(cls, device: object = "cpu") -> Generator:
            if is_cuda_device(device, allow_int=True):
                rec.record("torch.Generator(device=)", skip=2)
                device = target
            return orig.__new__(cls, device)  # type: ignore[call-arg]  # Generator.__new__ takes the device

    Generator.__doc__ = orig.__doc__
    return Generator


def _remember_for_compile(cuda_api: dict[str, object], accel_api: dict[str, object]) -> None:
    """Hand torch.compile the replacements it must treat as PyTorch's own (``dynamo_rules``)."""
    factories = [fn for fn in (getattr(torch, name, None) for name in FACTORIES) if dynamo_rules.is_own(fn)]
    nvtx = getattr(torch.cuda, "nvtx", None)
    markers = [fn for fn in (getattr(nvtx, name, None) for name in NVTX_FUNCTIONS if name != "range")
               if dynamo_rules.is_own(fn)]
    dynamo_rules.remember(cuda_api, factories, markers,
                          [fn for name, fn in accel_api.items() if name in accelerator_api.FOLDED])


def install(target: str, log_path: str | None = None, repo_root: str | None = None) -> SiteCounter:
    """Map CUDA onto ``target`` ("cpu" or "tpx") for the rest of this process. Idempotent."""
    if "recorder" in _state:
        return _state["recorder"]
    if target not in ("cpu", "tpx"):
        raise ValueError(f"redirect target must be 'cpu' or 'tpx', got {target!r}")
    rec = SiteCounter(log_path, target, repo_root)
    cuda_api = build_cuda_api(target, rec)
    for name, fn in cuda_api.items():
        setattr(torch.cuda, name, fn)
    # torch.accelerator answers for CUDA, as on the machine the code was written for (tpx answers for itself)
    accel_api = accelerator_api.build_accelerator_api(cuda_api, rec) if target == "cpu" else {}
    accelerator_api.install_accelerator_api(accel_api)
    for name, cls in legacy_types(target, rec).items():
        setattr(torch.cuda, name, cls)
    patch_legacy_type_checks(target, rec)
    patch_nvtx(rec)
    if hasattr(torch.cuda, "amp"):
        torch.cuda.amp.GradScaler  # noqa: B018 - resolve the lazy attribute before patching bases
    _patch_amp(target, rec)
    _patch_distributed(target, rec)
    _patch_module_to(target, rec)
    _patch_cpp_extension(target, rec)
    patch_methods(target, rec)

    def module_cuda(self: torch.nn.Module, device: object = None) -> torch.nn.Module:
        rec.record("Module.cuda", skip=3)
        return self.to(torch.device(target))

    # torch's own method, replaced on purpose (the child's monkeypatching)
    torch.nn.Module.cuda = module_cuda  # type: ignore[method-assign,assignment]

    orig_default = torch.set_default_device

    def set_default_device(device: object) -> None:
        if is_cuda_device(device, allow_int=True):
            rec.record("torch.set_default_device", skip=3)
            device = target
        orig_default(device)  # type: ignore[arg-type]  # only CUDA values were replaced

    torch.set_default_device = set_default_device

    orig_load = torch.load

    @functools.wraps(orig_load)
    def load(f: Any, map_location: Any = None, *args: Any, **kwargs: Any) -> Any:
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
    torch.Generator = _generator_class(target, rec)  # type: ignore[misc]  # torch's class, replaced on purpose
    sys.meta_path.insert(0, _UnsupportedImportFinder(rec, target))
    strategy = os.environ.get(STRATEGY_ENV, "patch")
    if strategy == "mode":
        # Every torch call passes through the mode: also maps torch.device("cuda") objects and
        # device arguments of APIs not in the tables, at a per-op cost (benchmarks/sandbox.py).
        mode = CudaRedirectMode(target, rec)
        mode.__enter__()  # type: ignore[no-untyped-call]  # untyped in torch
        _state["mode"] = mode
    elif strategy == "patch":
        install_patches(target, rec)
    else:
        raise ValueError(f"{STRATEGY_ENV}={strategy!r}: use 'patch' (default) or 'mode'")
    _state["recorder"], _state["strategy"] = rec, strategy
    _remember_for_compile(cuda_api, accel_api)
    logger.debug("CUDA redirect installed: target=%s strategy=%s log=%s", target, strategy, log_path)
    return rec


def install_from_env() -> SiteCounter | None:
    """Install from ``FERRY_REDIRECT_CUDA`` / ``FERRY_REDIRECT_LOG`` / ``FERRY_WORKSPACE``."""
    target = os.environ.get("FERRY_REDIRECT_CUDA")
    if not target:
        return None
    return install(target, os.environ.get("FERRY_REDIRECT_LOG"), os.environ.get("FERRY_WORKSPACE"))
