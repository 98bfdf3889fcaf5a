"""Typed results of trace parsing (pydantic)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

SignatureKind = Literal[
    "tpx_float64",
    "unsupported_op",
    "tpx_oom",
    "mixed_devices",
    "cuda_not_compiled",
    "missing_cuda_package",
    "cuda_unmappable",
    "syntax_error",
    "import_error",
    "timeout",
    "killed_by_limit",
    "disk_quota",
    "rendezvous",
    "teardown_hang",
    "other",
]


class Frame(BaseModel):
    file: str  # relative to the repo for user frames, as printed otherwise
    line: int | None = None
    function: str | None = None
    source: str | None = None
    user: bool = False  # inside the user's repository (or code given on the command line)


class ExceptionInfo(BaseModel):
    exc_type: str
    message: str = ""
    frames: list[Frame] = Field(default_factory=list)  # all frames, outermost first
    relation: Literal["primary", "cause", "context"] = "primary"  # how it links to the next one
    origin: Literal["main", "dataloader_worker", "subprocess", "pytest"] = "main"


class Signature(BaseModel):
    kind: SignatureKind
    op: str | None = None  # the aten op, package or API named by the failure
    detail: str | None = None  # short human explanation of the match

    def key(self) -> str:
        return f"{self.kind}:{self.op}" if self.op else self.kind


class ProcessStack(BaseModel):
    """A process of a run that did not exit (a teardown hang) and where its threads were."""

    pid: int  # as the run saw it
    role: str  # rank<N> (a torchrun worker), agent (torchrun's launcher) or proc
    shutting_down: bool = False  # its main code had returned: it hung in interpreter shutdown
    threads: list[list[Frame]] = Field(default_factory=list)  # each thread's frames, outermost first; main first
    text: str = ""  # the dump as written (escaped, capped); empty when the process wrote none

    @property
    def who(self) -> str:
        if self.role.startswith("rank"):
            return f"rank {self.role[4:]}"
        return "torchrun's agent" if self.role == "agent" else "a process"


Outcome = Literal["passed", "failed", "error", "skipped"]


class TestOutcome(BaseModel):
    nodeid: str
    outcome: Outcome
    message: str | None = None
    file: str | None = None
    line: int | None = None
    duration_s: float | None = None


class Trace(BaseModel):
    exc_type: str
    message: str
    user_frames: list[Frame] = Field(default_factory=list)  # innermost last
    library_frames: int = 0  # how many frames were outside the repo
    signature: Signature
    chain: list[ExceptionInfo] = Field(default_factory=list)  # earlier exceptions, oldest first
    origin: Literal["main", "dataloader_worker", "subprocess", "pytest"] = "main"
    wrapped_by: str | None = None  # e.g. the DataLoader/CalledProcessError wrapper type
    tests: list[TestOutcome] = Field(default_factory=list)
    rank: int | None = None  # the distributed rank (torchrun) / process index (mp.spawn) whose failure this is
    failed_ranks: list[int] = Field(default_factory=list)  # every rank that printed a traceback
    stacks: list[ProcessStack] = Field(default_factory=list)  # teardown_hang: each stuck process's stacks

    @property
    def location(self) -> str | None:
        """``file:line`` of the innermost user frame."""
        if not self.user_frames:
            return None
        f = self.user_frames[-1]
        return f"{f.file}:{f.line}" if f.line else f.file
