"""Cheap op statistics for profilers: per-op calls and time, CPU fallbacks, syncs, bytes moved.

Counters are plain dict/list updates on the kernel path (no locks: the GIL serialises them).
Read them with ``torch.tpx.op_stats()`` / ``backend.stats.snapshot()``.
"""

from __future__ import annotations

from typing import Any

# op name -> [calls, total_ns, cpu_fallback_calls]
ops: dict[str, list[int]] = {}
# sync kind -> count   (item, tolist, cpu, nonzero, ...)
syncs: dict[str, int] = {}
# [host_to_device_bytes, device_to_host_bytes, h2d_copies, d2h_copies]
transfers: list[int] = [0, 0, 0, 0]
enabled: bool = True


def record_op(name: str, ns: int, fallback: bool = False) -> None:
    entry = ops.get(name)
    if entry is None:
        ops[name] = [1, ns, 1 if fallback else 0]
    else:
        entry[0] += 1
        entry[1] += ns
        if fallback:
            entry[2] += 1


def record_sync(kind: str) -> None:
    syncs[kind] = syncs.get(kind, 0) + 1


def record_h2d(nbytes: int) -> None:
    transfers[0] += nbytes
    transfers[2] += 1


def record_d2h(nbytes: int) -> None:
    transfers[1] += nbytes
    transfers[3] += 1


def _cpp_counters() -> tuple[list, dict[str, int], list[int]]:
    """What the C++ kernels (tpx_dispatch.cpp) counted, if the extension is loaded: (op, calls, ns,
    cpu_fallback_calls) rows, syncs by kind, and transfers (laid out as ``transfers``)."""
    from . import _ext

    if not _ext.is_loaded():
        return [], {}, [0, 0, 0, 0]
    mod = _ext.get()
    return mod.op_counters(), mod.sync_counters(), mod.transfer_counters()


def reset() -> None:
    from . import _ext

    if _ext.is_loaded():
        _ext.get().reset_op_counters()
    ops.clear()
    syncs.clear()
    transfers[:] = [0, 0, 0, 0]


def snapshot() -> dict[str, Any]:
    """A JSON-ready copy of all counters."""
    merged = {name: list(entry) for name, entry in ops.items()}
    cpp_ops, cpp_syncs, cpp_transfers = _cpp_counters()
    for name, calls, ns, fallbacks in cpp_ops:
        entry = merged.setdefault(name, [0, 0, 0])
        entry[0] += calls
        entry[1] += ns
        entry[2] += fallbacks
    all_syncs = dict(syncs)
    for kind, n in cpp_syncs.items():
        all_syncs[kind] = all_syncs.get(kind, 0) + n
    moved = [a + b for a, b in zip(transfers, cpp_transfers, strict=True)]
    op_rows = {
        name: {
            "calls": calls,
            "time_us": round(ns / 1000.0, 3),
            "cpu_fallback_calls": fb,
            "where": "cpu-fallback" if fb else "tpx",
        }
        for name, (calls, ns, fb) in sorted(merged.items(), key=lambda kv: -kv[1][0])
    }
    return {
        "ops": op_rows,
        "cpu_fallback_ops": {n: r["cpu_fallback_calls"] for n, r in op_rows.items() if r["cpu_fallback_calls"]},
        "syncs": all_syncs,
        "device_to_host_syncs": sum(all_syncs.values()),
        "bytes_host_to_device": moved[0],
        "bytes_device_to_host": moved[1],
        "copies_host_to_device": moved[2],
        "copies_device_to_host": moved[3],
    }
