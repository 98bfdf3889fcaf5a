"""Device helpers shared by the training and evaluation code."""

import torch as T
from torch import cuda as tc


def get_device(prefer_gpu: bool = True) -> T.device:
    """The GPU we train on (the current CUDA device) when there is one, else the CPU."""
    if prefer_gpu and tc.is_available():
        return T.device("cuda", tc.current_device())
    return T.device("cpu")


def describe(device: T.device) -> str:
    if device.type == "cuda":
        return f"{tc.get_device_name(device)}, {tc.device_count()} visible"
    return "cpu"


def to_device(batch, device: T.device):
    """Move every tensor of a batch; non_blocking overlaps the copy with compute on a GPU."""
    return tuple(t.to(device, non_blocking=True) for t in batch)


def synchronize(device: T.device) -> None:
    if device.type == "cuda":
        tc.synchronize(device)


def peak_memory_mb(device: T.device) -> float:
    if device.type == "cuda":
        return tc.max_memory_allocated(device) / 2**20
    return 0.0
