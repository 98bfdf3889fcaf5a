"""Tensor and Storage methods that only make sense on CUDA, mapped for the target device.

``pin_memory`` (page-locked host memory for fast copies to a GPU), ``record_stream`` (the
caching allocator's cross-stream bookkeeping) and ``Storage.cuda`` (``torch.load``'s
``map_location=lambda storage, loc: storage.cuda()``). Each mapping is recorded in the log.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import torch

from .cuda_api import _Stream
from .sites import SiteCounter

if TYPE_CHECKING:  # typing only: the sandboxed child imports no more than it needs
    from collections.abc import Callable


def _patch_pin_memory(rec: SiteCounter) -> None:
    def pin_memory(self: torch.Tensor, device: object = None) -> torch.Tensor:
        # Pinned memory only speeds up host->GPU copies; the target reads host memory as it is.
        # A copy, as pin_memory() of an unpinned tensor is (writes to it must not reach the source).
        rec.record("Tensor.pin_memory", skip=3)
        return self.clone(memory_format=torch.contiguous_format)

    pin_memory.__doc__ = torch.Tensor.pin_memory.__doc__
    # torch's own method, replaced on purpose (the child's monkeypatching)
    torch.Tensor.pin_memory = pin_memory  # type: ignore[method-assign,assignment]


def _patch_record_stream(rec: SiteCounter) -> None:
    orig: Callable[..., None] = torch.Tensor.record_stream

    @functools.wraps(orig)
    def record_stream(self: torch.Tensor, stream: Any) -> None:
        if isinstance(stream, _Stream):
            # The redirect's streams are ordered on the target: no allocation can be reused
            # while another stream still reads it, so there is nothing to record.
            rec.record("Tensor.record_stream", skip=3)
            return None
        return orig(self, stream)

    # torch's own method, replaced on purpose (the child's monkeypatching)
    torch.Tensor.record_stream = record_stream  # type: ignore[method-assign,assignment]


def _patch_storage_cuda(target: str, rec: SiteCounter) -> None:
    dev = torch.device(target)

    def untyped_cuda(self: torch.UntypedStorage, device: object = None, non_blocking: bool = False) -> Any:
        rec.record("Storage.cuda", skip=3)
        return self.to(device=dev, non_blocking=non_blocking)

    def typed_cuda(self: torch.TypedStorage, device: object = None, non_blocking: bool = False) -> Any:
        rec.record("Storage.cuda", skip=3)
        return self.to(device=dev, non_blocking=non_blocking)

    # torch's own methods, replaced on purpose (the child's monkeypatching); UntypedStorage
    # inherits ``cuda`` from _StorageBase.
    torch.storage._StorageBase.cuda = untyped_cuda  # type: ignore[method-assign,assignment]
    torch.storage.TypedStorage.cuda = typed_cuda  # type: ignore[method-assign]


def patch_methods(target: str, rec: SiteCounter) -> None:
    """Install the method mappings (both strategies)."""
    _patch_pin_memory(rec)
    _patch_record_stream(rec)
    _patch_storage_cuda(target, rec)
