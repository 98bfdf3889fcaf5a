"""Zero-copy conversion between tpx tensors and CPU tensors.

A tpx tensor's memory is ordinary host memory owned by tpx's allocator, so a CPU tensor can
alias it without copying:

* ``to_cpu(t)``: a CPU tensor with the same sizes, strides, storage offset and memory as the
  tpx tensor ``t`` (writes through either one are seen by the other). The CPU view keeps the
  tpx storage alive. Non-tpx tensors (and non-tensors) are returned unchanged. The view carries
  no autograd history.
* ``from_cpu(c)``: a tpx tensor over the CPU tensor ``c``'s memory, always zero-copy. The tpx
  tensor keeps ``c``'s storage alive and its bytes count against tpx's simulated capacity (may
  raise ``torch.OutOfMemoryError``) while it lives. ``c``'s storage is marked non-resizable so
  that its memory can never move under the tpx tensor. A CPU view made by ``to_cpu`` maps back
  to the original tpx storage (same ``untyped_storage()``), so ``from_cpu(to_cpu(t))`` shares
  storage with ``t``. tpx tensors are returned unchanged.

Neither function records statistics (they are not host<->device transfers; the memory never
moves). Both load the C++ extension on first use.
"""

from __future__ import annotations

import torch

from . import _ext


def to_cpu(t: torch.Tensor) -> torch.Tensor:
    """Zero-copy CPU view of a tpx tensor (same sizes, strides, offset, memory)."""
    if not isinstance(t, torch.Tensor) or t.device.type != "tpx":
        return t
    return _ext.get().to_cpu(t)


def from_cpu(t: torch.Tensor, index: int = -1) -> torch.Tensor:
    """A tpx tensor over a CPU tensor's memory (zero-copy), on device ``tpx:index`` (default: the
    current device)."""
    if not isinstance(t, torch.Tensor) or t.device.type == "tpx":
        return t
    return _ext.get().from_cpu(t, index)
