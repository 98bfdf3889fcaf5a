"""Reads the tpx op statistics (``torch.tpx.op_stats()``, backend/stats.py) into ``TpxStats``."""

from __future__ import annotations

import logging
from typing import Annotated, Any

from pydantic import BaseModel, Field

logger = logging.getLogger(__name__)

# Bounded: these are also read back from a run's profile.json (tools/profile/profile_doc.py).
Int64 = Annotated[int, Field(ge=-(2**63), le=2**63 - 1)]
Finite = Annotated[float, Field(allow_inf_nan=False)]


class TpxOpStat(BaseModel):
    op: str
    count: Int64 = 0
    time_s: Finite = 0.0
    fallback_calls: Int64 = 0


class TpxStats(BaseModel):
    ops: list[TpxOpStat] = Field(default_factory=list)
    fallback_ops: list[str] = Field(default_factory=list)
    syncs: dict[str, Int64] = Field(default_factory=dict)
    d2h_syncs: Int64 = 0
    h2d_copies: Int64 = 0
    d2h_copies: Int64 = 0
    bytes_h2d: Int64 = 0
    bytes_d2h: Int64 = 0
    matmul_precision: str | None = Field(None, description="tpx setting: auto (follows torch), highest, bf16")


def normalise(raw: dict[str, Any]) -> TpxStats:
    """Map ``torch.tpx.op_stats()`` output onto TpxStats."""
    ops = [
        TpxOpStat(op=name, count=int(row.get("calls", 0)), time_s=float(row.get("time_us", 0.0)) / 1e6,
                  fallback_calls=int(row.get("cpu_fallback_calls", 0)))
        for name, row in (raw.get("ops") or {}).items()
    ]
    fallback = set((raw.get("cpu_fallback_ops") or {}).keys()) | {o.op for o in ops if o.fallback_calls}
    return TpxStats(
        ops=sorted(ops, key=lambda o: (-o.time_s, -o.count, o.op)),
        fallback_ops=sorted(fallback),
        syncs={str(k): int(v) for k, v in (raw.get("syncs") or {}).items()},
        d2h_syncs=int(raw.get("device_to_host_syncs", 0) or 0),
        h2d_copies=int(raw.get("copies_host_to_device", 0) or 0),
        d2h_copies=int(raw.get("copies_device_to_host", 0) or 0),
        bytes_h2d=int(raw.get("bytes_host_to_device", 0) or 0),
        bytes_d2h=int(raw.get("bytes_device_to_host", 0) or 0),
    )


def _loaded() -> Any | None:
    import torch

    return getattr(torch, "tpx", None)


def read_tpx_stats() -> TpxStats | None:
    """Current tpx op statistics, or ``None`` if tpx is not loaded in this process."""
    mod = _loaded()
    if mod is None or not hasattr(mod, "op_stats"):
        return None
    try:
        stats = normalise(mod.op_stats())
    except Exception:  # stats are optional evidence
        logger.debug("torch.tpx.op_stats() failed", exc_info=True)
        stats = TpxStats()
    stats.matmul_precision = tpx_matmul_precision()
    return stats


def tpx_matmul_precision() -> str | None:
    """The matmul precision tpx kernels use right now: "bf16" or "highest".

    tpx's "auto" setting means bf16 operands unless torch was explicitly asked for "highest";
    the effective choice is read from the kernels' state, the configured one as a fallback."""
    try:
        from backend import kernels

        return "bf16" if kernels.S.matmul_bf16 else "highest"
    except Exception:  # other backend layouts: the configured value
        pass
    try:
        from backend import config as tpx_config  # what backend.get_config() returns

        return str(tpx_config.get_config().matmul_precision)
    except Exception:
        return None


def reset_tpx_stats() -> None:
    try:
        from backend import stats

        stats.reset()
    except Exception:
        logger.debug("tpx stats reset unavailable", exc_info=True)
