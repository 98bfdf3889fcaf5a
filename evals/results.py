"""One case's result (a line of results.jsonl) and reading a run's results back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, ValidationError

RESULTS_FILE = "results.jsonl"
Grade = Literal["resolved", "partial", "failed"]
TestOutcomeName = Literal["passed", "failed", "error", "skipped", "not_run"]


class GradedTests(BaseModel):
    """Outcomes of the grading tests on tpx, per node id."""

    fail_to_pass: dict[str, TestOutcomeName] = Field(default_factory=dict)
    pass_to_pass: dict[str, TestOutcomeName] = Field(default_factory=dict)

    @property
    def f2p_ok(self) -> bool:
        return all(o == "passed" for o in self.fail_to_pass.values())

    @property
    def p2p_ok(self) -> bool:
        return all(o == "passed" for o in self.pass_to_pass.values())

    def failing(self) -> list[str]:
        return [n for n, o in {**self.fail_to_pass, **self.pass_to_pass}.items() if o != "passed"]


class RepoTests(BaseModel):
    """The repository's own tests (the case's test command) in one run: how many it collected and passed."""

    collected: int = 0
    passed: int = 0
    ran: bool = Field(default=True, description="False: only collected (the tests on the original, where every "
                                                "test of the migrated code passed and none is lost)")

    def text(self) -> str:
        return f"{self.passed}/{self.collected}" if self.ran else f"{self.collected} collected"


def repo_tests_text(before: RepoTests | None, after: RepoTests | None) -> str:
    """"2/2 -> 1/2": the repository's tests passed/collected on the original (CUDA on CPU) and after, on tpx."""
    if before is None and after is None:
        return "-"
    return f"{before.text() if before else '-'} -> {after.text() if after else '-'}"


class CaseResult(BaseModel):
    """How one case went: the migration, its grading, and what it cost."""

    schema_version: int = 1
    suite: str
    name: str
    kind: Literal["synthetic", "real"]
    difficulty: str = "medium"
    idiom_groups: list[str] = Field(default_factory=list)
    expected_status: str
    status: str = Field(description="the migration's named status (or a harness failure: failed_timeout, "
                                    "failed_harness, failed_environment)")
    grade: Grade
    reason: str = Field(default="", description="why it is not resolved (empty when resolved)")
    tests: GradedTests = Field(default_factory=GradedTests)
    parity_passed: bool | None = None
    iterations: int = 0
    runs: int = 0
    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = Field(default=None, description="None: no price known for the model used")
    model: str | None = None
    wall_s: float = 0.0
    own_run_s: float | None = Field(default=None, description="the migrated code's run command on tpx, once")
    ratio: float | None = Field(default=None, description="migration wall time / own run time")
    node_s: dict[str, float] = Field(default_factory=dict,
                                     description="seconds per graph node (its steps summed by node name)")
    run_s: dict[str, float] = Field(default_factory=dict,
                                    description="the migration's runs' own durations summed by role (reference, "
                                                "target, tests, cpu_check, golden, profile...)")
    rules_fired: list[str] = Field(default_factory=list)
    tests_before: RepoTests | None = Field(default=None, description=(
        "the case's own test command on the original (CUDA on CPU): collected and passed (None: no test command "
        "or it did not run)"))
    tests_after: RepoTests | None = Field(default=None, description="the same on the migrated code, on tpx")
    out_dir: str
    patch: str | None = Field(default=None, description="the migration's ferry.patch (path)")

    @property
    def resolved(self) -> bool:
        return self.grade == "resolved"

    @property
    def as_expected(self) -> bool:
        return self.status == self.expected_status


class ResultsError(ValueError):
    """A results file or directory cannot be read back."""


def results_path(run_dir: Path) -> Path:
    return run_dir / RESULTS_FILE if run_dir.is_dir() else run_dir


def read_results(run: Path) -> list[CaseResult]:
    """The cases of a run: ``run`` is its output directory or its results.jsonl."""
    path = results_path(Path(run))
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ResultsError(f"cannot read {path}: {exc.strerror or exc}; give an eval output directory "
                           f"(holding {RESULTS_FILE}) or the file itself") from exc
    out: list[CaseResult] = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            out.append(CaseResult.model_validate(json.loads(line)))
        except (ValueError, ValidationError) as exc:
            raise ResultsError(f"{path}:{n} is not a case result: {exc}") from exc
    return out


def append_result(path: Path, result: CaseResult) -> None:
    """Add one line, flushed at once (a run killed half-way keeps the cases it finished)."""
    with path.open("a", encoding="utf-8") as fh:
        fh.write(result.model_dump_json() + "\n")
        fh.flush()
