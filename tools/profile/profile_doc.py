"""The shape of ``profile.json`` (tools/profile/child.py writes it), as read back by the report.

The file comes out of a sandboxed run, so it is validated before the report uses it: wrong types,
absurd or non-finite numbers and a ``trace`` that is not a plain file name in the profile directory
(``../../etc/shadow``) end in one clear ``InvalidArtifact``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from tools.profile.models import SyncSite
from tools.profile.tpx_model import TpxStats

Count = Annotated[int, Field(ge=0, le=2**63 - 1)]
Step = Annotated[int, Field(ge=0, le=2**63 - 1)]
Finite = Annotated[float, Field(allow_inf_nan=False)]


class ProfilerOp(BaseModel):
    op: str
    count: Count
    self_cpu_us: Finite
    cpu_total_us: Finite = 0.0
    device_us: Finite = 0.0


class Window(BaseModel):
    start_step: Step | None = None
    end_step: Step | None = None
    wall_s: Finite | None = None
    steps: Annotated[int, Field(ge=1, le=2**63 - 1)] | None = None


class DynamoEvent(BaseModel):
    kind: Literal["graph_break", "recompile"]
    message: str
    locations: list[tuple[str, Annotated[int, Field(ge=0, le=2**31)]]] = Field(default_factory=list)


class DynamoSummary(BaseModel):
    counters: dict[str, dict[str, Count]] = Field(default_factory=dict)
    events: list[DynamoEvent] = Field(default_factory=list)


class DeviceOps(BaseModel):
    """Aten ops the run dispatched (tools/profile/device_ops.py): on tpx, and anywhere else."""

    tpx: Count = 0
    other: Count = 0
    before_tpx: Count = 0  # of ``other``: the ops before the first tpx op (all of them when there was none)
    compute_tpx: Count = 0  # of ``tpx``: the model's compute ops (device_ops.COMPUTE_OPS)
    compute_other: Count = 0  # of ``other``: the same, not on tpx


class ProfileDoc(BaseModel):
    model_config = ConfigDict(extra="ignore")

    format: str | None = None
    repo_root: str | None = None
    config: dict[str, Any] = Field(default_factory=dict)
    steps_seen: Step = 0
    window: Window = Field(default_factory=Window)
    ops: list[ProfilerOp] = Field(default_factory=list)
    syncs: list[SyncSite] = Field(default_factory=list)
    tpx: TpxStats | None = None
    tpx_window: TpxStats | None = None
    device_ops: DeviceOps | None = None
    device_ops_scope: Literal["run", "through_window"] | None = None
    dynamo: DynamoSummary = Field(default_factory=DynamoSummary)
    matmul_precision: str | None = None
    trace: str | None = None

    @field_validator("window", "dynamo", mode="before")
    @classmethod
    def _null_is_empty(cls, value: Any) -> Any:
        return {} if value is None else value

    @field_validator("trace")
    @classmethod
    def _plain_name(cls, value: str | None) -> str | None:
        if value is not None and (not value or "/" in value or "\\" in value or "\0" in value
                                  or value in (".", "..") or len(value) > 255):
            raise ValueError(f"trace must be a plain file name inside the profile directory, got {value[:80]!r}")
        return value
