"""Byte sizes: the units and how messages and results show a size (standard library only)."""

from __future__ import annotations

GiB = 1024**3
MiB = 1024**2


def format_size(n: int) -> str:
    """``4 GiB``, ``64 MiB``, ``1.5 GiB``: sizes as the messages and results show them."""
    for unit, size in (("TiB", 1024**4), ("GiB", GiB), ("MiB", MiB), ("KiB", 1024)):
        if n >= size:
            value = n / size
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{n} bytes"
