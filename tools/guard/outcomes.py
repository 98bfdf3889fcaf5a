"""The dynamic check: the tests a run collected and passed, against the reference's (GRD007)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from tools.artifact_json import InvalidArtifact, load_json, validate
from tools.guard.models import COVERAGE_MARGIN, GuardFinding, TestsSnapshot
from tools.runner.api import COLLECTED_DIR, COVERAGE_FILE


def _file_of(nodeid: str) -> str:
    return nodeid.partition("::")[0] or nodeid


def lost_tests(before: TestsSnapshot, after: TestsSnapshot) -> list[GuardFinding]:
    """A finding for each test that passed on the reference and is missing after, or did not pass."""
    out: list[GuardFinding] = []
    for nodeid, outcome in sorted(before.outcomes.items()):
        if outcome != "passed":
            continue
        now = after.outcomes.get(nodeid)
        if now == "passed":
            continue
        what = "is no longer collected" if now is None else f"ends {now}"
        out.append(GuardFinding(rule="GRD007", file=_file_of(nodeid), test=nodeid.rpartition("::")[2] or nodeid,
                                detail=f"{nodeid} passed on the reference and {what} after the migration"))
    return out


class _CoverageReport(BaseModel):
    percent: float | None = None
    error: str | None = None


def read_coverage(artifacts_dir: Path) -> tuple[float | None, str | None]:
    """(percent, None) from a ``coverage=True`` run's report, or (None, why there is none)."""
    from sandbox.artifacts import ArtifactMissing, ArtifactRefused

    try:
        report = validate(_CoverageReport, load_json(Path(artifacts_dir) / COLLECTED_DIR, COVERAGE_FILE),
                          "the coverage report")
    except ArtifactMissing:
        return None, "the test run wrote no coverage report (the test command does not run pytest, or it stopped early)"
    except (ArtifactRefused, InvalidArtifact) as exc:
        return None, f"the coverage report was not read: {exc}"
    return (report.percent, None) if report.percent is not None else (None, report.error or "no figure")


def coverage_drop(before: TestsSnapshot, after: TestsSnapshot, margin: float = COVERAGE_MARGIN) -> GuardFinding | None:
    """GRD008 when the migrated code's tests cover ``margin`` points less of the repository's code than the
    original's did (both measured); None otherwise."""
    if before.coverage is None or after.coverage is None or after.coverage >= before.coverage - margin:
        return None
    return GuardFinding(rule="GRD008", file="(the repository)", test=None,
                        detail=(f"line coverage of the repository's code fell from {before.coverage:.1f}% on the "
                                f"reference to {after.coverage:.1f}%, more than the {margin:g}-point margin"))
