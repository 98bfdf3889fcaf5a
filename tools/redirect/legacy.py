"""Legacy typed tensors under the redirect: ``torch.cuda.FloatTensor`` and its kin.

Old code builds tensors with ``torch.cuda.FloatTensor(...)``, checks ``x.type() ==
"torch.cuda.FloatTensor"`` or ``isinstance(x, torch.cuda.FloatTensor)``, converts with
``x.type(torch.cuda.FloatTensor)`` / ``x.type("torch.cuda.HalfTensor")`` and sets
``torch.set_default_tensor_type(torch.cuda.FloatTensor)``. Each of these answers as it would
for a CUDA tensor when the tensor is on the target device, and is recorded in the log.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from .sites import SiteCounter
from .tables import LEGACY_TENSOR_TYPES

_CUDA_PREFIX = "torch.cuda."


class _CudaTypeName(str):
    """``x.type()`` of a tensor on the target: torch's own answer ("torch.FloatTensor"), which
    also compares equal to the CUDA name the original code expects ("torch.cuda.FloatTensor").

    Only ``==``/``!=`` (and so ``in`` over a list or tuple) see the CUDA name; hashing, printing
    and string methods see torch's answer.
    """

    cuda_name: str
    recorder: SiteCounter

    def __new__(cls, name: str, cuda_name: str, recorder: SiteCounter) -> _CudaTypeName:
        obj = super().__new__(cls, name)
        obj.cuda_name, obj.recorder = cuda_name, recorder
        return obj

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str) and str(other) == self.cuda_name:
            self.recorder.record(f"Tensor.type() == {self.cuda_name}", skip=3)
            return True
        return str.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    __hash__ = str.__hash__

    def __reduce__(self) -> tuple[type[str], tuple[str]]:
        return (str, (str(self),))  # pickled or copied: torch's plain answer


class _LegacyCudaType(type):
    """Metaclass of the ``torch.cuda.<Name>Tensor`` stand-ins: calling one constructs (as the
    CPU legacy constructor does, then on the target); ``isinstance`` checks dtype and device."""

    dtype: torch.dtype
    target: str
    recorder: SiteCounter

    def __call__(cls, *args: Any, **kwargs: Any) -> torch.Tensor:
        cls.recorder.record(f"torch.cuda.{cls.__name__}", skip=3)
        kwargs.pop("device", None)
        cpu_ctor = getattr(torch, cls.__name__)  # torch.FloatTensor & co. take every legacy form
        result: torch.Tensor = cpu_ctor(*args, **kwargs).to(cls.target)
        return result

    def __instancecheck__(cls, obj: object) -> bool:
        return isinstance(obj, torch.Tensor) and obj.dtype == cls.dtype and obj.device.type == cls.target


def legacy_types(target: str, rec: SiteCounter) -> dict[str, type]:
    """name -> stand-in class for ``torch.cuda.<name>`` (the table in tables.py)."""
    return {
        name: _LegacyCudaType(name, (), {"dtype": getattr(torch, dt), "target": target, "recorder": rec,
                                         "__module__": "torch.cuda"})
        for name, dt in LEGACY_TENSOR_TYPES.items()
    }


def _legacy_name(arg: object) -> str | None:
    """The name ("FloatTensor") of a CUDA legacy type given as its class or "torch.cuda.<Name>"."""
    if isinstance(arg, _LegacyCudaType):
        return arg.__name__
    if isinstance(arg, str) and arg.startswith(_CUDA_PREFIX) and arg[len(_CUDA_PREFIX):] in LEGACY_TENSOR_TYPES:
        return arg[len(_CUDA_PREFIX):]
    return None


def patch_legacy_type_checks(target: str, rec: SiteCounter) -> None:
    """``Tensor.type()`` and ``torch.set_default_tensor_type`` with CUDA legacy types."""
    cuda_names = {getattr(torch, dt): f"{_CUDA_PREFIX}{name}" for name, dt in LEGACY_TENSOR_TYPES.items()}
    orig_type = torch.Tensor.type

    @functools.wraps(orig_type)
    def tensor_type(self: torch.Tensor, dtype: Any = None, non_blocking: bool = False, **kwargs: Any) -> Any:
        if dtype is None and not kwargs:
            name: str = orig_type(self)
            cuda_name = cuda_names.get(self.dtype)
            if cuda_name is not None and self.device.type == target and self.layout == torch.strided:
                return _CudaTypeName(name, cuda_name, rec)
            return name
        legacy = _legacy_name(dtype)
        if legacy is not None:
            rec.record("Tensor.type(torch.cuda.*)", skip=3)
            return self.to(device=target, dtype=getattr(torch, LEGACY_TENSOR_TYPES[legacy]),
                           non_blocking=non_blocking)
        return orig_type(self, dtype, non_blocking, **kwargs)

    # torch's own method, replaced on purpose (the child's monkeypatching)
    torch.Tensor.type = tensor_type  # type: ignore[method-assign,assignment]

    orig_default = torch.set_default_tensor_type

    @functools.wraps(orig_default)
    def set_default_tensor_type(t: Any) -> None:
        legacy = _legacy_name(t)
        if legacy is None:
            orig_default(t)
            return
        rec.record("torch.set_default_tensor_type", skip=3)
        orig_default(f"torch.{legacy}")  # the dtype (and torch's own error for a non-float type)
        if target != "cpu":  # a CUDA default type also makes the factories build on the device
            torch.set_default_device(target)

    torch.set_default_tensor_type = set_default_tensor_type
