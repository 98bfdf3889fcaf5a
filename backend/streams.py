"""Stream bookkeeping ops for tpx tensors.

``Tensor.record_stream(s)``: on CUDA it tells the caching allocator that the tensor's memory is
used by the work queued on ``s``, so the memory is not handed out again before that work is done
(a tensor made on a side stream and used on another one, as a prefetcher does). tpx runs every
kernel synchronously on the host as it is issued: no queued work on any stream can still read
memory that is freed, so there is nothing to record. The checks are CUDA's: a stream of the
tensor's device type. Without this kernel the op reached the CPU fallback and failed ("Could not
run 'aten::record_stream' with arguments from the 'CPU' backend").
"""

from __future__ import annotations

import torch


def record_stream(self: torch.Tensor, s: torch.Stream) -> None:
    """aten::record_stream for a tpx tensor (nothing to record; the stream must be a tpx one)."""
    if s.device.type != "tpx":
        raise RuntimeError(f"record_stream: expected a tpx stream for a tpx tensor, got a stream of device "
                           f"{s.device} (use a stream of the tensor's device, e.g. torch.tpx.current_stream())")
