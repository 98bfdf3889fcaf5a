"""Reads the tpx op statistics (``torch.tpx.op_stats()``, backend/stats.py) into a plain dict.

Child side (standard library and torch only): the dict has the fields of the host's
``tools.profile.tpx_model.TpxStats``, which validates it when a profile is read back.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from ..guest import tpx_backend_module

logger = logging.getLogger(__name__)


def empty_stats() -> dict[str, Any]:
    return {"ops": [], "fallback_ops": [], "syncs": {}, "d2h_syncs": 0, "h2d_copies": 0, "d2h_copies": 0,
            "bytes_h2d": 0, "bytes_d2h": 0, "matmul_precision": None}


def normalise(raw: dict[str, Any]) -> dict[str, Any]:
    """Map ``torch.tpx.op_stats()`` output onto the fields of ``TpxStats``."""
    ops: list[dict[str, Any]] = [
        {"op": str(name), "count": int(row.get("calls", 0)), "time_s": float(row.get("time_us", 0.0)) / 1e6,
         "fallback_calls": int(row.get("cpu_fallback_calls", 0))}
        for name, row in (raw.get("ops") or {}).items()
    ]
    fallback = {str(k) for k in (raw.get("cpu_fallback_ops") or {})} | {o["op"] for o in ops if o["fallback_calls"]}
    stats = empty_stats()
    stats.update(
        ops=sorted(ops, key=lambda o: (-o["time_s"], -o["count"], o["op"])),
        fallback_ops=sorted(fallback),
        syncs={str(k): int(v) for k, v in (raw.get("syncs") or {}).items()},
        d2h_syncs=int(raw.get("device_to_host_syncs", 0) or 0),
        h2d_copies=int(raw.get("copies_host_to_device", 0) or 0),
        d2h_copies=int(raw.get("copies_device_to_host", 0) or 0),
        bytes_h2d=int(raw.get("bytes_host_to_device", 0) or 0),
        bytes_d2h=int(raw.get("bytes_device_to_host", 0) or 0),
    )
    return stats


def _loaded() -> Any | None:
    torch = sys.modules.get("torch")
    return getattr(torch, "tpx", None) if torch is not None else None


def read_tpx_stats() -> dict[str, Any] | None:
    """Current tpx op statistics, or ``None`` if tpx is not loaded in this process."""
    mod = _loaded()
    if mod is None or not hasattr(mod, "op_stats"):
        return None
    try:
        stats = normalise(mod.op_stats())
    except Exception:  # stats are optional evidence
        logger.debug("torch.tpx.op_stats() failed", exc_info=True)
        stats = empty_stats()
    stats["matmul_precision"] = tpx_matmul_precision()
    return stats


def tpx_matmul_precision() -> str | None:
    """The matmul precision tpx kernels use right now: "bf16" or "highest".

    tpx's "auto" setting means bf16 operands unless torch was explicitly asked for "highest";
    the effective choice is read from the kernels' state, the configured one as a fallback."""
    try:
        kernels = tpx_backend_module("kernels")
        if kernels is not None:
            return "bf16" if kernels.S.matmul_bf16 else "highest"
    except Exception:  # other backend layouts: the configured value
        pass
    try:
        tpx_config = tpx_backend_module("config")  # what backend.get_config() returns
        if tpx_config is not None:
            return str(tpx_config.get_config().matmul_precision)
    except Exception:
        pass
    return None


def reset_tpx_stats() -> None:
    try:
        stats = tpx_backend_module("stats")
        if stats is not None:
            stats.reset()
    except Exception:
        logger.debug("tpx stats reset unavailable", exc_info=True)
