"""ProfileReport and its parts (pydantic)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field

# Counts and line numbers as read back from a run's profile.json: bounded, so a forged
# 4000-digit number cannot overflow the report's arithmetic.
Count = Annotated[int, Field(ge=0, le=2**63 - 1)]


class OpRow(BaseModel):
    op: str
    count: int
    time_us: float
    source: Literal["torch.profiler", "tpx"]
    cpu_fallback: bool = False


class SyncSite(BaseModel):
    category: Literal["d2h_sync", "h2d_copy"]
    kind: str
    file: str
    line: Count
    function: str = ""
    source: str = ""
    count: Count
    window_count: Count = 0
    bytes: Count = 0


class CompileEvent(BaseModel):
    kind: Literal["graph_break", "recompile"]
    reason: str
    file: str | None = None
    line: int | None = None
    count: int = 1


Severity = Literal["high", "medium", "low"]


class ProfileFinding(BaseModel):
    kind: Literal["host_sync", "h2d_copy", "cpu_fallback", "graph_break", "recompile", "hot_op"]
    severity: Severity
    title: str
    suggestion: str
    file: str | None = None
    line: int | None = None
    source: str | None = None
    count: int = 0

    def where(self) -> str | None:
        """``file:line`` of the finding's source line (``file`` alone without a line), None when unknown."""
        if not self.file:
            return None
        return f"{self.file}:{self.line}" if self.line else self.file


class DeviceWork(BaseModel):
    """Evidence of work on the device in one profiled run: how many aten ops ran on tpx, of all the
    ops it dispatched from its first tpx op on (CPU ones included; the set-up before it, a weight
    init or data made before the move, is left out; a run with no tpx op counts every op), counted
    through the profiler window (``scope`` ``through_window``) or over the whole run when it had no
    steps (``run``); ``run_tpx_ops`` is tpx's own count over the whole run (backend/stats.py)."""

    tpx_ops: Count = 0
    total_ops: Count = 0
    tpx_share: float | None = Field(None, ge=0.0, le=1.0, description="tpx_ops / total_ops; None: nothing counted")
    scope: Literal["run", "through_window"] | None = None
    run_tpx_ops: Count = 0
    # the model's compute (matmul, convolution, attention, RNN, embedding, loss ops: tools/profile/device_ops.py):
    # what the verdict measures when the run has any, since host-side work (data, I/O) is not the model's
    compute_tpx_ops: Count = 0
    compute_ops: Count = 0
    compute_share: float | None = Field(None, ge=0.0, le=1.0, description="compute_tpx_ops / compute_ops")

    def describe(self) -> str:
        share = "no share" if self.tpx_share is None else f"{self.tpx_share:.0%}"
        text = f"{self.tpx_ops} of {self.total_ops} ops on tpx ({share})"
        if self.compute_share is not None:
            text += f", {self.compute_tpx_ops} of {self.compute_ops} compute ops ({self.compute_share:.0%})"
        return text


class ProfileReport(BaseModel):
    profile_dir: str
    repo_root: str
    steps_profiled: int | None = None
    window_wall_s: float | None = None
    top_ops_by_time: list[OpRow] = Field(default_factory=list)
    top_ops_by_count: list[OpRow] = Field(default_factory=list)
    profiler_top_ops: list[OpRow] = Field(default_factory=list, description="torch.profiler window, by self CPU time")
    fallback_time_us: float = 0.0
    fallback_ops: dict[str, int] = Field(default_factory=dict)
    syncs: list[SyncSite] = Field(default_factory=list)
    d2h_syncs_total: int = 0
    h2d_copies_per_step: float | None = None
    graph_breaks: list[CompileEvent] = Field(default_factory=list)
    recompiles: list[CompileEvent] = Field(default_factory=list)
    findings: list[ProfileFinding] = Field(default_factory=list)
    device_work: DeviceWork | None = None
    trace_path: str | None = None
    markdown_path: str | None = None
    notes: list[str] = Field(default_factory=list)
