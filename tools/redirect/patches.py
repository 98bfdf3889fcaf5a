"""The default redirect strategy: targeted wrappers on the APIs that take a device.

Only factories, ``Tensor.to``/``cuda``/``new_*`` and device contexts are wrapped, so compute
ops run at full speed (a TorchFunctionMode would sit in front of every op). ``torch.device
("cuda")`` objects stay CUDA devices: they are mapped where they are used.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import torch

from .mode import is_cuda_device
from .sites import SiteCounter
from .tables import FACTORIES, TENSOR_FACTORIES

if TYPE_CHECKING:  # typing only: the sandboxed child imports no more than it needs
    from collections.abc import Callable


def _wrap_factory(fn: Callable[..., Any], api: str, target: torch.device, rec: SiteCounter) -> Callable[..., Any]:
    @functools.wraps(fn)
    def factory(*args: Any, **kwargs: Any) -> Any:
        dev = kwargs.get("device")
        if dev is not None and is_cuda_device(dev, allow_int=True):
            kwargs["device"] = target
            rec.record(api, skip=3)
        if kwargs.get("pin_memory"):
            # pinned host memory is for copies to a GPU; the target reads plain host memory
            kwargs["pin_memory"] = False
            rec.record(f"{api.removesuffix('(device=)')}(pin_memory=)", skip=3)
        return fn(*args, **kwargs)

    return factory


def install_patches(target: str, rec: SiteCounter) -> None:
    dev = torch.device(target)
    for name in FACTORIES:
        fn = getattr(torch, name, None)
        if fn is not None:
            setattr(torch, name, _wrap_factory(fn, f"torch.{name}(device=)", dev, rec))
    for name in TENSOR_FACTORIES:
        fn = getattr(torch.Tensor, name, None)
        if fn is not None:
            setattr(torch.Tensor, name, _wrap_factory(fn, f"Tensor.{name}(device=)", dev, rec))

    orig_to = torch.Tensor.to
    # The redirect replaces torch's own methods on purpose (the child's monkeypatching).
    torch.Tensor.to = redirected_to(orig_to, dev, rec, "Tensor.to")  # type: ignore[method-assign]

    def cuda(self: torch.Tensor, device: object = None, non_blocking: bool = False,
             memory_format: torch.memory_format = torch.preserve_format) -> torch.Tensor:
        rec.record("Tensor.cuda", skip=3)
        return orig_to(self, dev, non_blocking=non_blocking, memory_format=memory_format)

    # torch's own method, replaced on purpose (the child's monkeypatching)
    torch.Tensor.cuda = cuda  # type: ignore[method-assign,assignment]

    from torch.utils import _device

    orig_ctx = _device.DeviceContext.__init__

    @functools.wraps(orig_ctx)
    def ctx_init(self: _device.DeviceContext, device: object) -> None:
        if is_cuda_device(device, allow_int=True):
            rec.record("with torch.device(cuda)", skip=4)
            device = dev
        orig_ctx(self, device)

    # torch's own method, replaced on purpose (the child's monkeypatching)
    _device.DeviceContext.__init__ = ctx_init  # type: ignore[method-assign]
    _keep_device_contexts(_device)


def _keep_device_contexts(_device: Any) -> None:
    """``with torch.device("meta")`` / ``torch.set_default_device``: torch's DeviceContext gives a factory
    called without ``device=`` the context's device when the function it sees is one of
    ``torch.utils._device._device_constructors()``, a set built from ``torch.empty``, ``torch.zeros``...
    With the factories wrapped, that set would hold the wrappers, and the function the mode sees is the
    original one the wrapper calls: every model built under ``torch.device("meta")`` came out on the CPU
    (and drew its initial weights from the CPU generator: a meta-device init's numbers changed). The set
    holds both from now on."""
    orig = _device._device_constructors
    originals = frozenset(getattr(fn, "__wrapped__", fn) for fn in orig())

    @functools.wraps(orig)
    def constructors() -> set[Any]:
        both: set[Any] = set(originals) | set(orig())
        return both

    # torch's own function, replaced on purpose (the child's monkeypatching)
    _device._device_constructors = functools.lru_cache(1)(constructors)


def redirected_to(orig_to: Any, dev: torch.device, rec: SiteCounter, label: str) -> Any:
    """``orig_to`` (``Tensor.to`` / ``Module.to``) with a CUDA device or a CUDA ordinal (an int, which
    PyTorch cannot parse without an accelerator), positional or ``device=``, sent to ``dev``."""

    @functools.wraps(orig_to)
    def to(self: Any, *args: Any, **kwargs: Any) -> Any:
        if args and is_cuda_device(args[0], allow_int=True):
            args = (dev, *args[1:])
            rec.record(label, skip=3)
        elif "device" in kwargs and is_cuda_device(kwargs["device"], allow_int=True):
            kwargs["device"] = dev
            rec.record(label, skip=3)
        return orig_to(self, *args, **kwargs)

    return to
