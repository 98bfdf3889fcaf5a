"""The dynamic check: the tests a run collected and passed, against the reference's (GRD007)."""

from __future__ import annotations

from tools.guard.models import GuardFinding, TestsSnapshot


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
