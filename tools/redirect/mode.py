"""Device-argument rewriting for torch functions: "cuda"/"cuda:N"/cuda devices -> the target."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch.overrides import TorchFunctionMode

from .sites import SiteCounter

if TYPE_CHECKING:  # typing only: the sandboxed child imports no more than it needs
    from collections.abc import Callable, Collection, Sequence


_TO_FUNCS = {torch._C.TensorBase.to, torch._C._nn._parse_to}
_CUDA_METHOD = torch._C.TensorBase.cuda
_DEVICE_TYPE = torch.device


def is_cuda_device(dev: object, *, allow_int: bool = False) -> bool:
    if isinstance(dev, str):
        return dev == "cuda" or dev.startswith("cuda:")
    if isinstance(dev, _DEVICE_TYPE):
        return dev.type == "cuda"
    return allow_int and isinstance(dev, int) and not isinstance(dev, bool)


def _name(func: object) -> str:
    qual = str(getattr(func, "__qualname__", None) or getattr(func, "__name__", repr(func)))
    return qual.replace("_VariableFunctionsClass.", "torch.").replace("TensorBase.", "Tensor.")


class CudaRedirectMode(TorchFunctionMode):
    """Rewrites CUDA device arguments; everything else passes straight through."""

    def __init__(self, target: str, recorder: SiteCounter) -> None:
        super().__init__()
        self.target = target
        self.target_device = _DEVICE_TYPE(target)
        self.recorder = recorder

    def __torch_function__(self, func: Callable[..., Any], types: Collection[type], args: Sequence[Any] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        if func is _CUDA_METHOD:
            self.recorder.record("Tensor.cuda", skip=3)
            non_blocking = bool(kwargs.get("non_blocking", False))
            return args[0].to(self.target_device, non_blocking=non_blocking)
        dev = kwargs.get("device")
        if dev is not None and is_cuda_device(dev, allow_int=True):
            kwargs = dict(kwargs)
            kwargs["device"] = self.target_device
            self.recorder.record(f"{_name(func)}(device=)", skip=3)
        if kwargs.get("pin_memory"):  # pinned host memory is for copies to a GPU
            kwargs = dict(kwargs)
            kwargs["pin_memory"] = False
            self.recorder.record(f"{_name(func)}(pin_memory=)", skip=3)
        if func is _DEVICE_TYPE:
            if args and is_cuda_device(args[0]):
                self.recorder.record("torch.device", skip=3)
                return self.target_device
        elif func in _TO_FUNCS and args:
            start = 1 if func is torch._C.TensorBase.to else 0
            new = list(args)
            for i in range(start, min(len(new), start + 1)):
                if is_cuda_device(new[i], allow_int=True):
                    new[i] = self.target_device
                    self.recorder.record("Tensor.to" if start else "Module.to", skip=3)
            args = tuple(new)
        return func(*args, **kwargs)
