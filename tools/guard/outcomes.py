"""The dynamic check: a run's tests against the reference's outcomes (GRD007) or its collected node ids.

The collected ids are the original's tests run with ``--collect-only``, all a passing tests run needs."""

from __future__ import annotations

import logging
from pathlib import Path

from pydantic import BaseModel

from tools.artifact_json import InvalidArtifact, load_json, validate
from tools.guard.models import COVERAGE_MARGIN, GuardFinding, TestsSnapshot
from tools.runner.api import COLLECT_FILE, COLLECTED_DIR, COVERAGE_FILE

logger = logging.getLogger(__name__)


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


def not_collected(collected: list[str], after: TestsSnapshot) -> list[str]:
    """The tests a run on the original collected (``--collect-only``) that ``after`` does not name."""
    return sorted(set(collected) - set(after.outcomes))


class _CollectReport(BaseModel):
    tests: list[str]


def read_collected(artifacts_dir: Path) -> list[str] | None:
    """The node ids a ``collect_only=True`` run wrote, or None when it wrote none (the command does not run
    pytest, or it stopped before its tests were collected) or the file was not read."""
    from sandbox.artifacts import ArtifactMissing, ArtifactRefused

    try:
        report = validate(_CollectReport, load_json(Path(artifacts_dir) / COLLECTED_DIR, COLLECT_FILE),
                          "the collected tests")
    except ArtifactMissing:
        return None
    except (ArtifactRefused, InvalidArtifact) as exc:
        logger.debug("the collected tests were not read: %s", exc)
        return None
    return report.tests


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
