"""The shape of a probe dump's ``index.json`` (tools/probe/recorder.py writes it), as read back.

A dump comes out of a sandboxed run, so its index is validated before anything uses it: wrong
types, absurd numbers, a tensor chunk that is not a plain file name in the dump's directory, or a
module marker without its module all end in one clear ``InvalidArtifact``.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Required, TypedDict, cast

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from tools.probe.recorder import FORMAT
from tools.probe.results import RESULT_KINDS

Int64 = Annotated[int, Field(ge=-(2**63), le=2**63 - 1)]
Count = Annotated[int, Field(ge=0, le=2**63 - 1)]
CHUNK_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
# recorded tensors: module calls, explicit records, and the first optimizer steps' gradients, optimizer
# state and updated parameters (tools/probe/grads.py), what a program saves and its final tensors (results.py)
TENSOR_KINDS = ("module_input", "module_output", "record", "grad", "optim_state", "param_after", *RESULT_KINDS)


class ProbeEvent(BaseModel):
    """One event: a recorded tensor (``module_input``/``module_output``/``record``, a saved file's
    ``saved``, a final top-level tensor's ``final``) or a marker."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    seq: Int64
    kind: str
    key: str | None = None
    module: str | None = None
    call: Int64 | None = None
    step: Int64 | None = None
    leaf: str | None = None
    shape: list[Count] | None = None
    dtype: str | None = None
    device: str | None = None
    chunk: str | None = None
    same_as: str | None = None
    skipped: str | None = None
    nbytes: Count | None = None
    class_: str | None = Field(None, alias="class")

    @field_validator("chunk")
    @classmethod
    def _plain_chunk_name(cls, value: str | None) -> str | None:
        if value is not None and not CHUNK_NAME.match(value):
            raise ValueError(f"chunk must be a plain file name inside the dump directory, got {value[:80]!r}")
        return value

    @model_validator(mode="after")
    def _kind_fields(self) -> ProbeEvent:
        if self.kind in TENSOR_KINDS and self.key is None:
            raise ValueError(f"a {self.kind} event needs its key")
        if self.kind == "module_end" and (self.key is None or self.module is None or self.call is None):
            raise ValueError("a module_end event needs key, module and call")
        return self


# One validated event as the parity tools read it (``ProbeIndex.event_dicts``): the fields of
# ProbeEvent that were written (``class`` under its own name), and whatever else the run added.
ProbeEventDict = TypedDict("ProbeEventDict", {
    "seq": Required[int], "kind": Required[str], "key": str, "module": str, "call": int, "step": int, "leaf": str,
    "shape": list[int], "dtype": str, "device": str, "chunk": str, "same_as": str, "skipped": str, "nbytes": int,
    "class": str, "param": str, "attr": str, "optimizer": str, "dtensor": str,
}, total=False)


class ProbeTpxMeta(BaseModel):
    model_config = ConfigDict(extra="allow")

    matmul_precision: str | None = None
    fallback_ops: list[str] = Field(default_factory=list)


class ProbeMeta(BaseModel):
    """The run's metadata; only what the parity tools read is typed, the rest is kept as written."""

    model_config = ConfigDict(extra="allow")

    closed: bool = False
    dropped_events: Count = 0
    bytes_written: Count = 0
    bytes_dropped: Count = 0
    steps_seen: Int64 | None = None
    #: why the run stopped recording early (a budget was reached), if it did
    stopped: Annotated[str, Field(max_length=500)] | None = None
    stopped_at_seq: Count | None = None
    #: FERRY_PROBE_END: the probe ended the program after this many recorded steps (an evidence run)
    ended_after_steps: Count | None = None
    optimizer_steps: Int64 | None = None
    #: optimizer.step() calls in the whole run (optimizer_steps stops counting with the recording)
    optimizer_steps_total: Count | None = None
    matmul_precision: str | None = None
    final_matmul_precision: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    final_env: dict[str, str] | None = None
    tpx: ProbeTpxMeta | None = None
    #: the repository's files in the order the run began executing them (tools/probe/files_run.py)
    files_run: Annotated[list[Annotated[str, Field(max_length=1000)]], Field(max_length=256)] = Field(
        default_factory=list)


class ProbeIndex(BaseModel):
    format: Literal["ferry-probe/1"] = FORMAT
    meta: ProbeMeta = Field(default_factory=ProbeMeta)
    events: list[ProbeEvent] = Field(default_factory=list)
    scalars: dict[str, list[float]] = Field(default_factory=dict)
    scalar_steps: dict[str, list[Count]] = Field(default_factory=dict)
    module_ops: dict[str, list[str]] = Field(default_factory=dict)
    module_classes: dict[str, str] = Field(default_factory=dict)

    def event_dicts(self) -> list[ProbeEventDict]:
        """The events as the dicts the parity tools read (fields never written left out)."""
        # the dump of a validated ProbeEvent has exactly ProbeEventDict's shape (and its extra keys)
        return [cast(ProbeEventDict, e.model_dump(by_alias=True, exclude_none=True)) for e in self.events]

    def meta_dict(self) -> dict[str, Any]:
        return self.meta.model_dump(exclude_unset=True)
