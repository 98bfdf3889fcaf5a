"""GPU bookkeeping: which device we train on and how much memory a piece of work needs."""

import torch


def describe_gpu(index: int = 0) -> dict:
    """Facts about the GPU in use; refuses to go on without one."""
    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA device: this project trains on a GPU")
    torch.cuda.set_device(index)
    current = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(current)
    free, total = torch.cuda.mem_get_info()
    return {
        "count": torch.cuda.device_count(),
        "index": current,
        "name": torch.cuda.get_device_name(current),
        "total_memory": props.total_memory,
        "free": free,
        "total": total,
    }


class PeakMemory:
    """`with PeakMemory() as m: ...` then `m.peak` (bytes at the high-water mark, above the start)."""

    def __enter__(self):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        self.start = torch.cuda.memory_allocated()
        return self

    def __exit__(self, *exc):
        torch.cuda.synchronize()
        self.peak = torch.cuda.max_memory_allocated() - self.start
        self.reserved = torch.cuda.memory_reserved()
        return False


def release_cached_memory() -> int:
    """Give cached blocks back to the driver; returns the bytes still allocated."""
    torch.cuda.empty_cache()
    return torch.cuda.memory_allocated()
