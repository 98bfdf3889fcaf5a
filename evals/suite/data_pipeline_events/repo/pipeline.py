"""Input pipeline: pinned-memory DataLoader, asynchronous host-to-GPU copies, GPU timing."""

import torch
from torch.utils.data import DataLoader


def make_loader(dataset, batch_size: int, workers: int = 0, shuffle: bool = True, seed: int = 0):
    """Batches in pinned host memory so the copies to the GPU can overlap with compute."""
    return DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=shuffle,
        num_workers=workers,
        pin_memory=True,
        drop_last=shuffle,
        generator=torch.Generator().manual_seed(seed),
    )


def to_device(x, y):
    return x.cuda(non_blocking=True), y.cuda(non_blocking=True)


class CudaTimer:
    """Times a block of GPU work with a pair of CUDA events; the result is in .elapsed_ms."""

    def __init__(self):
        self.start = torch.cuda.Event(enable_timing=True)
        self.end = torch.cuda.Event(enable_timing=True)
        self.elapsed_ms = 0.0

    def __enter__(self):
        self.start.record()
        return self

    def __exit__(self, *exc):
        self.end.record()
        self.end.synchronize()
        self.elapsed_ms = self.start.elapsed_time(self.end)
        return False
