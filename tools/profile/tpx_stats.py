"""Adapter over the tpx op statistics exposed on ``torch.tpx`` (backend/, issue 2).

The backend is built in parallel; this module reads its statistics through a small set of
accepted shapes and normalises them into ``TpxStats``. Returns ``None`` when tpx is absent.
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import BaseModel, Field

logger = logging.getLogger(__name__)


class TpxOpStat(BaseModel):
    op: str
    count: int = 0
    time_s: float = 0.0
    fallback: bool = False


class TpxStats(BaseModel):
    ops: list[TpxOpStat] = Field(default_factory=list)
    fallback_ops: list[str] = Field(default_factory=list)
    d2h_syncs: int = 0
    h2d_copies: int = 0
    bytes_h2d: int = 0
    bytes_d2h: int = 0
    matmul_precision: str | None = None
    raw_keys: list[str] = Field(default_factory=list)


def _as_dict(obj: Any) -> dict[str, Any]:
    if obj is None:
        return {}
    if isinstance(obj, dict):
        return obj
    for attr in ("model_dump", "_asdict", "to_dict", "as_dict"):
        fn = getattr(obj, attr, None)
        if callable(fn):
            try:
                return dict(fn())
            except Exception:  # noqa: BLE001
                continue
    if hasattr(obj, "__dict__"):
        return {k: v for k, v in vars(obj).items() if not k.startswith("_")}
    return {}


def _first(d: dict[str, Any], *names: str, default: Any = None) -> Any:
    for n in names:
        if n in d and d[n] is not None:
            return d[n]
    return default


def normalise(raw: dict[str, Any]) -> TpxStats:
    """Map a stats dict (whatever the backend's exact field names) onto TpxStats."""
    ops_raw = _first(raw, "ops", "op_counts", "per_op", "by_op", default={})
    fallback_raw = _first(raw, "fallback_ops", "cpu_fallback_ops", "fallbacks", "fallback", default=[])
    fallback_names = set(fallback_raw.keys() if isinstance(fallback_raw, dict) else fallback_raw or [])
    ops: list[TpxOpStat] = []
    items = ops_raw.items() if isinstance(ops_raw, dict) else ((_as_dict(o).get("op") or _as_dict(o).get("name"), o) for o in ops_raw)
    for name, value in items:
        if name is None:
            continue
        if isinstance(value, (int, float)):
            count, time_s, fb = int(value), 0.0, False
        else:
            v = _as_dict(value)
            count = int(_first(v, "count", "calls", default=0))
            t = _first(v, "time_s", "seconds", "total_s", default=None)
            if t is None:
                t_ns = _first(v, "time_ns", "total_ns", default=None)
                t_us = _first(v, "time_us", "total_us", default=None)
                t = t_ns / 1e9 if t_ns is not None else (t_us / 1e6 if t_us is not None else 0.0)
            time_s = float(t)
            fb = bool(_first(v, "fallback", "cpu_fallback", "is_fallback", default=False))
        ops.append(TpxOpStat(op=str(name), count=count, time_s=time_s, fallback=fb or str(name) in fallback_names))
    fallback = sorted(fallback_names | {o.op for o in ops if o.fallback})
    syncs = _first(raw, "d2h_syncs", "device_to_host_syncs", "host_syncs", "syncs", default=0)
    if isinstance(syncs, (list, dict)):
        syncs = sum(syncs.values()) if isinstance(syncs, dict) else len(syncs)
    return TpxStats(
        ops=sorted(ops, key=lambda o: (-o.time_s, -o.count, o.op)),
        fallback_ops=[str(f) for f in fallback],
        d2h_syncs=int(syncs or 0),
        h2d_copies=int(_first(raw, "h2d_copies", "host_to_device_copies", default=0) or 0),
        bytes_h2d=int(_first(raw, "bytes_h2d", "h2d_bytes", "bytes_to_device", default=0) or 0),
        bytes_d2h=int(_first(raw, "bytes_d2h", "d2h_bytes", "bytes_to_host", default=0) or 0),
        matmul_precision=_first(raw, "matmul_precision", default=None),
        raw_keys=sorted(raw.keys()),
    )


def read_tpx_stats() -> TpxStats | None:
    """Current tpx op statistics, or ``None`` if tpx is not loaded in this process."""
    import torch

    mod = getattr(torch, "tpx", None)
    if mod is None:
        return None
    for name in ("op_stats", "get_op_stats", "stats", "op_statistics"):
        fn = getattr(mod, name, None)
        if fn is None:
            continue
        try:
            raw = fn() if callable(fn) else fn
        except Exception:  # noqa: BLE001
            logger.debug("torch.tpx.%s() failed", name, exc_info=True)
            continue
        data = _as_dict(raw)
        if data:
            stats = normalise(data)
            if stats.matmul_precision is None:
                stats.matmul_precision = _tpx_matmul_precision(mod)
            return stats
    return TpxStats(matmul_precision=_tpx_matmul_precision(mod))


def reset_tpx_stats() -> None:
    import torch

    mod = getattr(torch, "tpx", None)
    for name in ("reset_op_stats", "reset_stats", "clear_op_stats"):
        fn = getattr(mod, name, None) if mod is not None else None
        if callable(fn):
            try:
                fn()
                return
            except Exception:  # noqa: BLE001
                logger.debug("torch.tpx.%s() failed", name, exc_info=True)


def _tpx_matmul_precision(mod: Any) -> str | None:
    for name in ("get_matmul_precision", "matmul_precision"):
        fn = getattr(mod, name, None)
        try:
            value = fn() if callable(fn) else fn
        except Exception:  # noqa: BLE001
            continue
        if value is not None:
            return str(value)
    try:
        import backend

        cfg = getattr(backend, "config", None) or getattr(backend, "get_config", None)
        cfg = cfg() if callable(cfg) else cfg
        value = _as_dict(cfg).get("matmul_precision")
        return str(value) if value is not None else None
    except Exception:  # noqa: BLE001
        return None
