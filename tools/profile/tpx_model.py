"""The tpx op statistics as the host reads them back from a run's profile.json (``TpxStats``).

The child side (``tools/profile/tpx_stats.py``) writes plain dicts of this shape: it runs in the
user's interpreter, which has the standard library and torch only.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field

# Bounded: these are read back from a run's profile.json (tools/profile/profile_doc.py).
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
