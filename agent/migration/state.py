"""The migration's one typed state, with reducers on the fields that accumulate, and its readers.

The state holds plain JSON (LangGraph's checkpointers, SQLite and Postgres, store it without
custom serialisers and another process can resume it), but nothing reads it by key: every value
is a model's ``model_dump(mode="json")`` and comes back through a typed reader below
(``last_run(state) -> RunResult | None``, ``parity_of(state) -> ParityReport | None``...), the
tools' own models for the tools' results and :mod:`agent.migration.records` for the agent's.

Edits are held as file contents (``files``: relative path -> the text the workspace must hold), so
a workspace lost in a crash is rebuilt from the original repo plus ``files``.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from typing import Annotated, Any, TypedDict, TypeVar

from pydantic import BaseModel

from agent.errors import STATUSES, Status
from agent.migration.options import MigrationOptions as MigrationOptions  # stored as options_of reads it
from agent.migration.records import (
    CostQuestion,
    CpuCheck,
    DeviceWork,
    Edit,
    GuardEvent,
    Outputs,
    Plan,
    PreparedRun,
    ProfileRound,
    RunPhase,
    RunRecord,
    ScanDigest,
    Speculation,
    Step,
)
from tools.guard.models import CollectedTests, TestsSnapshot
from tools.parity.models import ParityReport
from tools.profile.models import ProfileFinding, ProfileReport
from tools.runner.models import RunResult

M = TypeVar("M", bound=BaseModel)


def merge_files(left: dict[str, str] | None, right: dict[str, str] | None) -> dict[str, str]:
    """Later writes of a file win; other files are kept."""
    return {**(left or {}), **(right or {})}


def add_counters(left: dict[str, float] | None, right: dict[str, float] | None) -> dict[str, float]:
    """Sum counters key by key (LLM calls, tokens)."""
    out = dict(left or {})
    for key, value in (right or {}).items():
        out[key] = out.get(key, 0) + value
    return out


class MigrationState(TypedDict, total=False):
    migration_id: str
    options: dict[str, Any]  # MigrationOptions
    workspace: str | None  # the private copy the target runs use
    files: Annotated[dict[str, str], merge_files]  # current text of every file the migration changed
    edits: Annotated[list[dict[str, Any]], operator.add]  # Edit, one per applied edit
    steps: Annotated[list[dict[str, Any]], operator.add]  # Step, one per finished node
    runs: Annotated[list[dict[str, Any]], operator.add]  # RunRecord, every run in order
    reference: dict[str, Any] | None  # RunResult of the reference run, once settled
    reference_pending: bool  # started in the background, not joined yet (await_reference joins it)
    golden: dict[str, Any] | None  # RunResult of the fp32 golden run (the original, autocast off), once run
    scan: dict[str, Any] | None  # ScanDigest
    plan: dict[str, Any] | None  # Plan
    last_run: dict[str, Any] | None  # RunResult: the latest target or test run
    last_phase: RunPhase | None  # which of the two last_run was
    target_ok: dict[str, Any] | None  # RunResult: the latest passing target run (probe/profile dirs)
    prepared_target: dict[str, Any] | None  # PreparedRun: the next round's target run, made by a cause trial
    speculation: dict[str, Any] | None  # Speculation: the first target run made as an evidence run + the FIX008 run
    device_work: dict[str, Any] | None  # DeviceWork of the latest passing target run
    device_work_error: str | None  # why that run's device work could not be read
    cpu_check: dict[str, Any] | None  # CpuCheck: the migrated code on CPU vs the reference
    diagnosis: dict[str, Any] | None  # agent.policy.base.Diagnosis: what failed, where
    proposal: dict[str, Any] | None  # agent.policy.base.Proposal: the next edit to apply
    # Keys "rule@file:line" of fixes already attempted (so a rule never loops on the same site).
    tried: Annotated[list[str], operator.add]
    iteration: int  # fix rounds applied
    parity: dict[str, Any] | None  # ParityReport
    profile: dict[str, Any] | None  # ProfileReport
    profile_error: str | None  # why there is no profile report (the migration is verified anyway)
    profile_round: dict[str, Any] | None  # ProfileRound: the model's one profile round under --llm
    llm_usage: Annotated[dict[str, float], add_counters]
    llm_cost_allowance_usd: Annotated[float, operator.add]  # what the user approved beyond --llm-max-cost
    cost_question: dict[str, Any] | None  # the cost cap was reached under --approve: spent_usd, cap_usd, ...
    # the texts of the files the model's last proposal edits, before it (the CPU guard reverts to them)
    llm_before: dict[str, str] | None
    elapsed_s: Annotated[float, operator.add]
    status: Status | None  # a named status (agent.errors.Status) once decided
    summary: str | None  # one paragraph: why the status, what is left for a human
    outputs: dict[str, str] | None  # Outputs
    reference_tests: dict[str, Any] | None  # TestsSnapshot: the test command on the original (CUDA on CPU)
    # CollectedTests: the tests the test command only collected on the original (its full run was not needed)
    reference_collected: dict[str, Any] | None
    tests_after: dict[str, Any] | None  # TestsSnapshot: the latest tests run of the migrated code
    guard: Annotated[list[dict[str, Any]], operator.add]  # GuardEvent, each decision of the test guard


State = Mapping[str, Any]  # what readers accept: the graph's state or a snapshot of it


def dump(model: BaseModel) -> dict[str, Any]:
    """A model as the state stores it."""
    return model.model_dump(mode="json")


def _one(state: State, key: str, model: type[M]) -> M | None:
    raw = state.get(key)
    return None if raw is None else model.model_validate(raw)


def _many(state: State, key: str, model: type[M]) -> list[M]:
    return [model.model_validate(item) for item in state.get(key) or []]


def options_of(state: State) -> MigrationOptions:
    return MigrationOptions.model_validate(state["options"])


def reference_of(state: State) -> RunResult | None:
    """The settled reference run (None while it is pending or before it started)."""
    return _one(state, "reference", RunResult)


def golden_of(state: State) -> RunResult | None:
    """The fp32 golden run (the original on CPU with its CUDA autocast off), once it ran."""
    return _one(state, "golden", RunResult)


def last_run(state: State) -> RunResult | None:
    return _one(state, "last_run", RunResult)


def target_ok_of(state: State) -> RunResult | None:
    return _one(state, "target_ok", RunResult)


def speculation_of(state: State) -> Speculation | None:
    """The evidence run of the first target round and the FIX008 run beside it (``agent.migration.nodes.evidence``)."""
    return _one(state, "speculation", Speculation)


def prepared_target_of(state: State) -> PreparedRun | None:
    """The run a cause trial made of the code the next round is expected to have (FIX008 written in)."""
    return _one(state, "prepared_target", PreparedRun)


def device_work_of(state: State) -> DeviceWork | None:
    return _one(state, "device_work", DeviceWork)


def cpu_check_of(state: State) -> CpuCheck | None:
    return _one(state, "cpu_check", CpuCheck)


def parity_of(state: State) -> ParityReport | None:
    return _one(state, "parity", ParityReport)


def profile_of(state: State) -> ProfileReport | None:
    return _one(state, "profile", ProfileReport)


def profile_round_of(state: State) -> ProfileRound | None:
    """The model's profile round (None: not asked, or no --llm)."""
    return _one(state, "profile_round", ProfileRound)


def findings_worth_a_change(state: State) -> list[ProfileFinding]:
    """The profile's high-severity findings (a sync or CPU fallback 10+ times, a copy every step...):
    what the model is shown in its profile round."""
    report = profile_of(state)
    return [f for f in report.findings if f.severity == "high"] if report is not None else []


def reference_tests_of(state: State) -> TestsSnapshot | None:
    """The tests the test command collected on the original code and how each ended (None: not run yet)."""
    return _one(state, "reference_tests", TestsSnapshot)


def reference_collected_of(state: State) -> CollectedTests | None:
    """The tests the test command collected on the original when it only collected them (``--collect-only``:
    every test of the migrated code passed, so none ran there; None: not collected so)."""
    return _one(state, "reference_collected", CollectedTests)


def tests_after_of(state: State) -> TestsSnapshot | None:
    """The tests of the latest tests run of the migrated code (None: none ran)."""
    return _one(state, "tests_after", TestsSnapshot)


def guard_events_of(state: State) -> list[GuardEvent]:
    """The test guard's decisions, in order."""
    return _many(state, "guard", GuardEvent)


def scan_of(state: State) -> ScanDigest | None:
    return _one(state, "scan", ScanDigest)


def plan_of(state: State) -> Plan | None:
    return _one(state, "plan", Plan)


def outputs_of(state: State) -> Outputs | None:
    return _one(state, "outputs", Outputs)


def edits_of(state: State) -> list[Edit]:
    return _many(state, "edits", Edit)


def steps_of(state: State) -> list[Step]:
    return _many(state, "steps", Step)


def runs_made_of(state: State) -> list[RunRecord]:
    """The runs the migration made (a ``reused`` record names a run made earlier, in another role)."""
    return [r for r in runs_of(state) if not r.reused]


def runs_of(state: State) -> list[RunRecord]:
    return _many(state, "runs", RunRecord)


# The plain fields: each reader returns what the state holds, with the default of an absent field.

def migration_id_of(state: State) -> str:
    """The migration's id (every state has one: KeyError otherwise)."""
    return str(state["migration_id"])


def has_options(state: State) -> bool:
    """Whether the state holds the user's options yet (a state under construction may not)."""
    return bool(state.get("options"))


def workspace_of(state: State) -> str | None:
    """The private copy the target runs use (None before ingest)."""
    value = state.get("workspace")
    return None if value is None else str(value)


def files_of(state: State) -> dict[str, str]:
    """Relative path -> the text the workspace must hold, for every file the migration changed."""
    files: dict[str, str] = state.get("files") or {}
    return files


def tried_of(state: State) -> list[str]:
    """Keys ``rule@file:line`` of the fixes already attempted."""
    tried: list[str] = state.get("tried") or []
    return tried


def iteration_of(state: State) -> int:
    """Fix rounds applied so far."""
    return int(state.get("iteration") or 0)


def elapsed_of(state: State) -> float:
    """Seconds the finished nodes took, in all."""
    return float(state.get("elapsed_s") or 0.0)


def reference_pending_of(state: State) -> bool:
    """Whether the reference run was started in the background and not joined yet."""
    return bool(state.get("reference_pending"))


def last_phase_of(state: State) -> RunPhase | None:
    """Which of the target run and the tests ``last_run`` was (None: none ran yet)."""
    phase: RunPhase | None = state.get("last_phase")
    return phase


def summary_of(state: State) -> str | None:
    """The paragraph saying why the status, once decided."""
    summary: str | None = state.get("summary")
    return summary


def device_work_error_of(state: State) -> str | None:
    """Why the latest passing run's device work could not be read."""
    error: str | None = state.get("device_work_error")
    return error


def profile_error_of(state: State) -> str | None:
    """Why there is no profile report."""
    error: str | None = state.get("profile_error")
    return error


def llm_counters_of(state: State) -> dict[str, float]:
    """The model's counters (calls, tokens...) summed over the migration."""
    counters: dict[str, float] = state.get("llm_usage") or {}
    return counters


def cost_allowance_of(state: State) -> float:
    """US dollars the user allowed beyond --llm-max-cost (approve_cost), 0 when none."""
    return float(state.get("llm_cost_allowance_usd") or 0.0)


def cost_question_of(state: State) -> CostQuestion | None:
    """The question on the reached cost cap, while it waits for approve_cost (None: none)."""
    return _one(state, "cost_question", CostQuestion)


def llm_before_of(state: State) -> dict[str, str]:
    """The texts of the files the model's last proposal edits, before it (empty: none kept)."""
    before: dict[str, str] = state.get("llm_before") or {}
    return before


def scanned(state: State) -> bool:
    """Whether the scan ran already (its digest is in the state)."""
    return bool(state.get("scan"))


# The policy's models (agent.policy.base.Diagnosis and Proposal) sit above the state: these readers give
# their JSON, agent.policy.base.diagnosis_of/proposal_of the models.

def diagnosis_json(state: State) -> dict[str, Any] | None:
    """The stored diagnosis as JSON (None or empty: none)."""
    raw: dict[str, Any] | None = state.get("diagnosis")
    return raw


def proposal_json(state: State) -> dict[str, Any] | None:
    """The next edit to apply as JSON (None or empty: none)."""
    raw: dict[str, Any] | None = state.get("proposal")
    return raw


def has_proposal(state: State) -> bool:
    """Whether an edit is proposed (what the graph's edges route on)."""
    return bool(state.get("proposal"))


#: the state a rejected profile change is reverted to, besides the files: the evidence they were verified with
EVIDENCE = ("parity", "last_run", "last_phase", "target_ok", "device_work", "device_work_error", "cpu_check",
            "profile", "profile_error")


def evidence_of(state: State) -> dict[str, Any]:
    """The evidence fields as the state holds them (None where absent)."""
    return {key: state.get(key) for key in EVIDENCE}


def status_of(state: State) -> Status | None:
    status = state.get("status")
    if status is not None and status not in STATUSES:
        raise ValueError(f"the state holds an unknown status {status!r}; expected one of {', '.join(STATUSES)}")
    return status  # checked against STATUSES just above


def llm_option(state: State) -> bool:
    """Whether the model may be asked."""
    return options_of(state).llm
