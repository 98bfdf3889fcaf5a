"""The CUDA device properties the redirect answers with (``torch.cuda.get_device_properties``).

PyTorch itself reads these fields from CUDA's ``_CudaDeviceProperties``: Inductor's cache key
(``gcnArchName``/``name``), its hardware hints (``multi_processor_count``, ``warp_size``,
``regs_per_multiprocessor``, ``max_threads_per_*``), its template heuristics
(``shared_memory_per_block_optin``), ``torch.cuda.get_device_capability`` (``major``/``minor``),
the profiler's trace metadata, NUMA binding (``pci_*``). The stand-in carries every one of them
with a value that describes one compute-capability 8.0 device whose memory is the target's, so
code that branches on them takes the branch it takes on such a GPU, and PyTorch never meets a
missing attribute. Standard library and torch only: this runs inside the user's process.
"""

from __future__ import annotations

from typing import NamedTuple

#: compute capability of the stand-in (sm_80: bf16, TF32 and flash attention are available on it)
MAJOR, MINOR = 8, 0
_MiB = 1024**2


class RedirectDeviceProperties(NamedTuple):
    """Field for field what ``torch.cuda.get_device_properties`` returns on a CUDA build (read-only;
    a named tuple, so that ``torch.compile`` folds it into a graph as it folds torch's own)."""

    name: str
    total_memory: int
    multi_processor_count: int
    major: int = MAJOR
    minor: int = MINOR
    # on a CUDA (not ROCm) build PyTorch answers the device's name here; ROCm checks ("gfx94" in
    # gcnArchName) are then false, as they are on an NVIDIA GPU
    gcnArchName: str = ""  # redirect_properties() sets it
    is_integrated: int = 0
    is_multi_gpu_board: int = 0
    max_threads_per_multi_processor: int = 2048
    max_threads_per_block: int = 1024
    regs_per_multiprocessor: int = 65536
    warp_size: int = 32
    uuid: str = "00000000-0000-0000-0000-000000000000"
    L2_cache_size: int = 40 * _MiB
    clock_rate: int = 1_410_000  # kHz
    memory_clock_rate: int = 1_215_000  # kHz
    memory_bus_width: int = 5120  # bits
    shared_memory_per_block: int = 48 * 1024
    shared_memory_per_block_optin: int = 163 * 1024
    shared_memory_per_multiprocessor: int = 164 * 1024
    pci_bus_id: int = 0
    pci_device_id: int = 0
    pci_domain_id: int = 0

    def __repr__(self) -> str:  # torch's own layout
        return (f"_CudaDeviceProperties(name='{self.name}', major={self.major}, minor={self.minor}, "
                f"gcnArchName='{self.gcnArchName}', total_memory={self.total_memory // _MiB}MB, "
                f"multi_processor_count={self.multi_processor_count}, uuid={self.uuid}, "
                f"pci_bus_id={self.pci_bus_id}, pci_device_id={self.pci_device_id}, "
                f"pci_domain_id={self.pci_domain_id}, L2_cache_size={self.L2_cache_size // _MiB}MB)")


def redirect_properties(name: str, total_memory: int, multi_processor_count: int,
                        target_props: object = None) -> RedirectDeviceProperties:
    """The stand-in's properties; a target device's own properties object (tpx's) supplies the
    fields it has (its name, memory, capability, ...), the CUDA defaults the rest."""
    values: dict[str, int | str] = {"name": name, "total_memory": total_memory,
                                    "multi_processor_count": max(1, multi_processor_count)}
    for key in RedirectDeviceProperties._fields:
        value = getattr(target_props, key, None) if target_props is not None else None
        if isinstance(value, (int, str)):
            values[key] = int(value) if isinstance(value, bool) else value
    values.setdefault("gcnArchName", values["name"])
    return RedirectDeviceProperties(**values)  # type: ignore[arg-type]
