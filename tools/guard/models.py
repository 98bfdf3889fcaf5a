"""The guard's typed inputs and outputs (pydantic): the files of a patch, its findings, the tests of a run."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from tools.trace.models import Outcome, TestOutcome

#: one id per kind of weakening; stable (reports, approvals and evals name them)
GuardRuleId = Literal["GRD001", "GRD002", "GRD003", "GRD004", "GRD005", "GRD006", "GRD007", "GRD008"]

#: rule id -> (short name, what it refuses)
RULES: dict[str, tuple[str, str]] = {
    "GRD001": ("test_removed", "a test function that passed on the reference is removed or renamed out of collection"),
    "GRD002": ("skip_added", "a skip, skipif, xfail or skipTest is added to a test (or a whole test module)"),
    "GRD003": ("assertions_lowered", "a test function holds fewer assertions than before"),
    "GRD004": ("tolerance_loosened", "a tolerance (atol, rtol, abs, rel, places, delta...) is loosened past the "
                                     "numerics policy's loosest figure"),
    "GRD005": ("exception_swallowed", "an assertion is wrapped in try/except that catches and does not re-raise"),
    "GRD006": ("collection_changed", "conftest.py or a pytest configuration section changes what pytest collects"),
    "GRD007": ("test_lost", "a test that passed on the reference is missing or not passing after the migration"),
    "GRD008": ("coverage_lowered", "line coverage of the repository's code drops by more than the margin"),
}

#: how many points of line coverage the migrated code's tests may lose against the original's before GRD008
COVERAGE_MARGIN = 5.0


class FileEdit(BaseModel):
    """One file of a patch: its text before the edit and after it (None: the file does not exist)."""

    path: str = Field(description="repository-relative, '/'-separated")
    before: str | None = None
    after: str | None = None


class GuardFinding(BaseModel):
    """A change the guard refuses, where it is and what it changed."""

    rule: GuardRuleId
    file: str
    line: int | None = None
    test: str | None = Field(default=None, description="the test function (Class.name or name) it concerns")
    detail: str

    @property
    def name(self) -> str:
        return RULES[self.rule][0]

    @property
    def site(self) -> str:
        return f"{self.file}:{self.line}" if self.line is not None else self.file

    @property
    def key(self) -> str:
        """What an approval names: the rule and the site."""
        return f"{self.rule}@{self.site}"

    def describe(self) -> str:
        return f"{self.rule} {self.name} at {self.site}: {self.detail}"


class GuardNote(BaseModel):
    """A change to a test module the guard let through as a documented exception (FIX008's tpx-only
    matmul precision setting)."""

    rule: str
    file: str
    line: int | None = None
    detail: str


class GuardRequest(BaseModel):
    """The static guard's input: the patch, and the tests that passed on the reference (None: not known)."""

    files: list[FileEdit]
    passed_on_reference: list[str] | None = Field(default=None, description="node ids of the reference's "
                                                                            "passing tests; None: no reference")


class GuardResult(BaseModel):
    findings: list[GuardFinding] = Field(default_factory=list)
    notes: list[GuardNote] = Field(default_factory=list)


class TestsSnapshot(BaseModel):
    """The tests one run collected and how each ended (junit, per node id)."""

    __test__ = False  # not a pytest class

    outcomes: dict[str, Outcome] = Field(default_factory=dict)
    run_status: str = ""
    coverage: float | None = Field(default=None, description="line coverage of the repository's code, percent "
                                                             "(None: not measured)")
    coverage_error: str | None = Field(default=None, description="why coverage was asked for and not measured")

    @classmethod
    def of(cls, tests: list[TestOutcome], run_status: str = "") -> TestsSnapshot:
        return cls(outcomes={t.nodeid: t.outcome for t in tests}, run_status=run_status)

    @property
    def collected(self) -> int:
        return len(self.outcomes)

    def count(self, outcome: Outcome) -> int:
        return sum(1 for o in self.outcomes.values() if o == outcome)

    @property
    def passed(self) -> int:
        return self.count("passed")

    def line(self) -> str:
        """"5 collected, 4 passed, 1 skipped"."""
        rest = ", ".join(f"{self.count(k)} {k}" for k in ("passed", "failed", "error", "skipped") if self.count(k))
        cov = f"; line coverage {self.coverage:.1f}%" if self.coverage is not None else ""
        return f"{self.collected} collected" + (f", {rest}" if rest else "") + cov


class CollectedTests(BaseModel):
    """The tests a run only collected (pytest's ``--collect-only``), as its junit report would name them."""

    __test__ = False  # not a pytest class

    tests: list[str] = Field(default_factory=list, description="node ids, as TestsSnapshot names them")
    run_status: str = ""

    @property
    def collected(self) -> int:
        return len(self.tests)
