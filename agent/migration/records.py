"""The agent's own records in the migration state (the tools' results are the tools' models).

Each is stored as JSON in :class:`agent.migration.state.MigrationState` and read back through the typed
readers there; nothing reads these dicts by key.
"""

from __future__ import annotations

import logging
from typing import Any, Literal

from pydantic import BaseModel, Field

from agent.errors import Status
from tools.guard.models import CollectedTests, TestsSnapshot
from tools.parity.models import CauseId, CauseTrial
from tools.patch import FileChange
from tools.profile.models import DeviceWork
from tools.runner.models import RefusedArtifact, RunResult, StartupTimes
from tools.trace.models import TestOutcome

logger = logging.getLogger(__name__)

__all__ = [
    "ACCELERATOR",
    "CpuCheck",
    "DeviceWork",
    "Edit",
    "EditKind",
    "EditSummary",
    "GuardDecision",
    "GuardEvent",
    "GuardOutcome",
    "LLMUsage",
    "MigrationRecord",
    "ModelPlan",
    "Outputs",
    "ParityOutcome",
    "Plan",
    "PreparedRun",
    "ProfileChange",
    "ProfileOutcome",
    "ProfileRound",
    "ReviewItem",
    "RunPhase",
    "RunRecord",
    "RunRole",
    "ScanDigest",
    "Speculation",
    "Step",
    "edit_by",
    "tests_of",
]


#: who made an edit: a codemod, a policy rule, the model, a person, or Ferry undoing a rejected model change
EditKind = Literal["codemod", "policy", "llm", "human", "revert"]


def edit_by(kind: EditKind, rule: str) -> str:
    """Who made an edit, as the report, result.json and pr.md say it: ``rule FRY001``, ``model``..."""
    if kind == "codemod":
        return f"rule {rule}" if rule else "codemods"
    return {"policy": f"rule {rule}", "llm": "model", "human": "person", "revert": "Ferry (revert)"}[kind]
#: the accelerator Ferry migrates to (what a plan targets, what ``ferry pr``'s branch is named for)
ACCELERATOR = "tpx"

RunRole = Literal["reference", "target", "tests", "profile", "cpu_check", "cpu_original", "golden", "cause_trial",
                  "reference_tests", "reference_collect", "evidence"]
RunPhase = Literal["run", "test"]


class Step(BaseModel):
    """One finished node: what happened, and how long it took."""

    node: str
    summary: str = ""
    seconds: float = 0.0


class Edit(BaseModel):
    """One applied edit: which step, who made it (a codemod, a policy rule, the model, a person), the
    files it changed, its diff and why."""

    step: str
    kind: EditKind
    rule: str
    files: list[str]
    diff: str
    reason: str
    site: str | None = None
    #: dtypes the edit changed (original -> new, "float64" -> "float32"): parity compares them at the new tier
    dtype_changes: dict[str, str] = Field(default_factory=dict)
    #: how many sites each rule changed (the codemods; a fix edit is one site of its rule)
    rule_counts: dict[str, int] = Field(default_factory=dict)

    @property
    def by(self) -> str:
        return edit_by(self.kind, self.rule)


class RunRecord(BaseModel):
    """A run, summarised for the migration's log (the full RunResult is in its artifacts dir)."""

    kind: RunRole
    command: list[str]
    status: str
    exit_code: int | None = None
    duration_s: float = 0.0
    signature: str | None = None
    isolation: str
    warm_start: bool = False
    reused: bool = Field(False, description=(
        "not run again: an earlier run of this same code and settings (a cause trial that ran the fix the "
        "policy then applied; the reference run an earlier migration of the same source, command and "
        "settings kept) serves as this role's run; its duration is that run's"))
    artifacts_refused: list[RefusedArtifact] = Field(default_factory=list)
    tests: dict[str, int] = Field(default_factory=dict, description=(
        "the run's tests by outcome (passed, failed, error, skipped), from the pytest report it wrote; "
        "empty: it wrote none"))
    startup: StartupTimes | None = Field(None, description=(
        "the run's time before the user's first line, by part (copy, sandbox and interpreter, bootstrap: torch, "
        "tpx, redirect, probe/profiler hooks); None: not measured"))
    ended_after_steps: int | None = Field(None, description=(
        "an evidence run the probe ended after this many recorded steps (status 'ended'): never a target run"))

    @classmethod
    def of(cls, kind: RunRole, run: RunResult, reused: bool = False) -> RunRecord:
        tests: dict[str, int] = {}
        for t in _test_outcomes(run):
            tests[t.outcome] = tests.get(t.outcome, 0) + 1
        return cls(kind=kind, command=run.command, status=run.status, exit_code=run.exit_code,
                   duration_s=run.duration_s, signature=run.signature_kind, isolation=run.isolation,
                   warm_start=run.warm_start, reused=reused, artifacts_refused=run.artifacts_refused, tests=tests,
                   startup=run.startup, ended_after_steps=run.ended_after_steps)

    def tests_counted(self) -> str | None:
        """"5 tests ran: 4 passed, 1 skipped", or None when the run wrote no pytest report."""
        if not self.tests:
            return None
        n = sum(self.tests.values())
        parts = ", ".join(f"{self.tests[k]} {k}" for k in ("passed", "failed", "error", "skipped") if self.tests.get(k))
        return f"{n} test{'s' if n != 1 else ''} ran: {parts}"


class PreparedRun(BaseModel):
    """A target run made ahead of its round: the matmul-precision cause trial ran the code with the policy's
    FIX008 already written in (not the workspace with ``TPX_MATMUL_PRECISION`` set), probed and profiled as a
    target run is. When the next round's code is that code (``files_digest``: ``agent.migration.workspace.code_digest``
    of the migration's edited files), ``target_run`` takes this run instead of running the same code again."""

    files_digest: str
    workspace: str = Field(description="the private copy the trial ran (the edited files written in)")
    run: RunResult


SpeculationPhase = Literal["pending", "declined", "done"]


class Speculation(BaseModel):
    """The first target run made as evidence (``agent.migration.nodes.evidence``): the plain code on tpx ended
    after its recorded steps (``run``, status ``ended``), with the FIX008 code's full run started beside it
    (scheduler key ``fix_key``, artifacts ``fix_dir``). ``pending``: parity has not judged the evidence yet;
    ``declined``: the full plain run is to be made (the evidence passed, or FIX008 did not remove the
    divergence); ``done``: settled (FIX008 applied from the FIX008 run, or the full plain run made). The
    evidence run is never a target run: nothing reads it as ``target_ok``."""

    files_digest: str = Field(description="the code the evidence run ran (agent.migration.workspace.code_digest)")
    run: RunResult
    phase: SpeculationPhase = "pending"
    fix_file: str
    fix_text: str = Field(description="the text of fix_file with FIX008 written in")
    fix_digest: str = Field(description="the digest of the code with FIX008 written in")
    fix_workspace: str
    fix_key: str
    fix_dir: str
    fix_run: RunResult | None = Field(None, description="the FIX008 run, once joined (kept for the full round's "
                                                         "precision trial when the evidence was declined)")
    reason: str = ""


def tests_of(run: RunResult) -> list[TestOutcome]:
    """The tests a run collected and how each ended (empty: it wrote no pytest report)."""
    return _test_outcomes(run)


def _test_outcomes(run: RunResult) -> list[TestOutcome]:
    """The run's tests: the trace's (a failing run), else its junit XML's (a passing run has no trace)."""
    from sandbox.artifacts import ArtifactMissing
    from tools.trace.pytest_out import JunitRefused, read_junit_xml

    if run.trace is not None and run.trace.tests:
        return run.trace.tests
    if run.junit_xml is None:
        return []
    try:
        return read_junit_xml(run.junit_xml)
    except (ArtifactMissing, JunitRefused, OSError) as exc:
        logger.debug("the tests of %s were not counted: %s", run.junit_xml, exc)
        return []


class ReviewItem(BaseModel):
    """A scan finding kept for the plan and the report."""

    rule: str
    file: str
    line: int
    category: str
    message: str


class ScanDigest(BaseModel):
    """What the scan of the original found: counts by category and every finding."""

    counts: dict[str, int] = Field(default_factory=dict)
    findings: list[ReviewItem] = Field(default_factory=list)

    def ids(self) -> dict[str, ReviewItem]:
        """The findings by the id the model's plan names them with (F1, F2... in scan order)."""
        return {f"F{i}": item for i, item in enumerate(self.findings, 1)}


class ModelPlan(BaseModel):
    """The model's plan over the scan (``agent.llm.planner``), validated: only files and finding ids the
    scan found (unknown ones are dropped, each with a warning). ``error``: why there is none (the
    offline plan ran)."""

    files: list[str] = Field(default_factory=list)
    findings: list[str] = Field(default_factory=list, description="finding ids (ScanDigest.ids) in the model's order")
    verify: list[str] = Field(default_factory=list)
    rationale: str = ""
    warnings: list[str] = Field(default_factory=list)
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


class Plan(BaseModel):
    """What the codemods will change, what is left for review, what the target run checks."""

    rewrite_files: list[str]
    auto_fix: int
    review: list[ReviewItem]
    entry_file: str | None = None
    target: str = ACCELERATOR
    codemod_device: str
    checks: list[str]
    max_iterations: int
    #: the model's plan under --llm (None: offline only); its order is what the report lists
    model: ModelPlan | None = None

    def ordered_files(self) -> list[str]:
        """The files to rewrite: the model's order first (when it planned), then the rest in offline order."""
        first = self.model.files if self.model is not None and self.model.ok else []
        return list(dict.fromkeys([f for f in first if f in self.rewrite_files] + self.rewrite_files))

    def ordered_review(self, scan: ScanDigest | None) -> list[ReviewItem]:
        """The findings left for review: the model's order first (when it planned), then the rest."""
        if self.model is None or not self.model.ok or scan is None:
            return list(self.review)
        ids = scan.ids()
        named = [ids[i] for i in self.model.findings if i in ids and ids[i] in self.review]
        return named + [r for r in self.review if r not in named]


class ProfileRound(BaseModel):
    """The one round per migration where the model is shown the profile's findings worth a change.

    ``phase``: ``verifying`` while its edit goes through the full verification; ``kept`` (everything
    passed), ``rejected`` (reverted to the last verified state: ``reason`` says why) or ``not_made``
    (the model made no change: ``reason``). ``base_files`` / ``base_evidence``: the last verified
    state, restored on a rejection."""

    phase: Literal["verifying", "kept", "rejected", "not_made"]
    findings: list[str] = Field(default_factory=list, description="the findings shown, as file:line  title")
    summary: str = ""
    files: list[str] = Field(default_factory=list, description="the files the model's change touched")
    reason: str = ""
    base_files: dict[str, str] = Field(default_factory=dict)
    base_evidence: dict[str, Any] = Field(default_factory=dict)


class CostQuestion(BaseModel):
    """The model's cost cap was reached under --approve: what the approve_cost node asks about."""

    spent_usd: float
    cap_usd: float
    next_worst_usd: float = 0.0
    reason: str = ""


class Outputs(BaseModel):
    """Where the report node wrote the migration's outputs."""

    dir: str
    patch: str
    report: str
    result: str
    trajectory: str | None = Field(default=None, description="trajectory.jsonl: the model's requests, replies and "
                                                             "tool calls (None: no model was asked)")


class EditSummary(BaseModel):
    """An edit as result.json lists it (the diff is in ferry.patch and report.md)."""

    step: str
    kind: EditKind
    rule: str
    by: str = Field(default="", description="who made it: 'rule FRY001', 'model', 'person', 'Ferry (revert)'")
    site: str | None = None
    files: list[str]
    reason: str


class LLMUsage(BaseModel):
    """What the model cost: counted even when its calls failed."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    retries: int = 0
    wall_s: float = 0.0
    failures: dict[str, int] = Field(default_factory=dict, description="failed requests by kind, e.g. timeout: 2")
    model: str | None = None
    cost_usd: float | None = Field(default=None, description="estimated from the price table; None: no price "
                                                             "known for the model (never guessed)")


class ParityOutcome(BaseModel):
    """What parity showed: ``passed`` is None when it was not checked or had nothing to compare
    (``verdict`` then says which: None or ``skipped``), never a guess."""

    verdict: Literal["pass", "warn", "fail", "skipped"] | None = None
    passed: bool | None = None
    summary: str | None = None
    first_divergence: str | None = None
    trials: list[CauseTrial] = Field(default_factory=list, description="candidate causes measured in side runs")
    explained_by: list[CauseId] = Field(default_factory=list, description=(
        "the settings whose side run removed the divergence of a failing default run (the program's computation "
        "unchanged): parity passes as measured"))
    measured: str | None = Field(None, description="the side runs' measurements, one sentence each")
    headline: str | None = Field(None, description="one line: verdict, tensors, the worst one, the loss curves")


class CpuCheck(BaseModel):
    """The CPU guard: the migrated code run on CPU (no accelerator, no CUDA redirect), compared at the
    CPU tier (every compared tensor within ``assert_close``'s tolerances for its dtype: same device,
    same seed) with the reference run, or, where they differ, with the original's own run on CPU.
    ``verdict`` ``not_applicable``: the original does not run on CPU either (it needs an accelerator),
    so there is no CPU path to keep; ``passed`` is then None. ``skipped``: not run, because nothing it could
    show would change the verdict (``agent.migration.nodes.cpu_check.moot``); ``passed`` None, ``run_status``
    ``not run``. ``reason`` says why in every case."""

    verdict: Literal["pass", "fail", "not_applicable", "skipped"]
    passed: bool | None
    reason: str
    run_status: str
    duration_s: float = 0.0
    compared: int = 0
    first_divergence: str | None = None
    against: Literal["reference", "original_on_cpu"] | None = None
    #: the model's edit this check rejected (its step, e.g. ``fix-3``): it was reverted and the model asked again
    rejected_edit: str | None = None


GuardDecision = Literal["refused", "accepted", "exception"]


class GuardEvent(BaseModel):
    """What the test guard (``tools.guard``, docs/guard.md) decided of one finding or exception: ``refused``
    (the migration ended ``guard_refused``), ``accepted`` (the user approved that rule at that site) or
    ``exception`` (the policy's tpx-only precision edit in a test module, let through as documented)."""

    decision: GuardDecision
    rule: str
    name: str = ""
    site: str
    test: str | None = None
    detail: str
    step: str = Field("", description="the edit (fix-N) or the tests run it was found in")

    def line(self) -> str:
        named = f" {self.name}" if self.name else ""
        return f"{self.rule}{named} at {self.site}: {self.detail}"


class GuardOutcome(BaseModel):
    """result.json: the tests before (the original, CUDA on CPU) and after (the migrated code on tpx), and
    the guard's decisions."""

    tests_before: TestsSnapshot | None = None
    tests_after: TestsSnapshot | None = None
    tests_before_collected: CollectedTests | None = Field(default=None, description=(
        "the tests the test command only collected on the original (``--collect-only``), where running them was "
        "not needed: every test of the migrated code passed and none is lost (None: they ran, or did not)"))
    events: list[GuardEvent] = Field(default_factory=list)

    def of(self, decision: str) -> list[GuardEvent]:
        return [e for e in self.events if e.decision == decision]


class ProfileOutcome(BaseModel):
    findings: int = 0
    error: str | None = None


class ProfileChange(BaseModel):
    """result.json: what came of the model's profile round (``ProfileRound`` without its snapshot)."""

    outcome: Literal["verifying", "kept", "rejected", "not_made"]
    findings: list[str] = Field(default_factory=list)
    summary: str = ""
    files: list[str] = Field(default_factory=list)
    reason: str = ""


class MigrationRecord(BaseModel):
    """result.json (the design's MigrationResult; the service's response of that name carries it):
    how a migration ended, what it changed, what it showed, what it cost."""

    migration_id: str
    status: Status
    summary: str | None = None
    source: str
    run_command: str
    test_command: str | None = None
    python: str | None = None  # the runs' interpreter (--python; None: Ferry's own)
    env: dict[str, str] = Field(default_factory=dict)  # the user's own variables of every run (--env)
    cwd: str | None = None  # where every run started, relative to the repository (--cwd)
    entry_file: str | None = None  # the repository file the run command runs first (None: not found)
    iterations: int = 0
    runs: int = 0
    run_log: list[RunRecord] = Field(default_factory=list)
    llm: LLMUsage = Field(default_factory=LLMUsage)
    wall_time_s: float = 0.0
    edits: list[EditSummary] = Field(default_factory=list)
    patch_files: list[FileChange] = Field(default_factory=list)
    parity: ParityOutcome = Field(default_factory=ParityOutcome)
    profile: ProfileOutcome = Field(default_factory=ProfileOutcome)
    plan_source: Literal["offline", "model"] = "offline"  # whose order the report lists
    model_plan: ModelPlan | None = None  # the model's plan under --llm (or why there is none)
    profile_change: ProfileChange | None = None  # the model's profile round under --llm
    device_work: DeviceWork | None = None
    cpu_check: CpuCheck | None = None
    guard: GuardOutcome = Field(default_factory=GuardOutcome)
    steps: list[Step] = Field(default_factory=list)
    applied: bool | None = None
