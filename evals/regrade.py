"""``ferry eval --regrade DIR``: grade an earlier run's saved patches again, without migrating."""

from __future__ import annotations

import logging
from pathlib import Path

from pydantic import ValidationError

from agent.migration.records import MigrationRecord
from evals.cases import Suite, SyntheticCase, slug
from evals.harness import grade_real, grade_synthetic
from evals.results import RESULTS_FILE, CaseResult, append_result, read_results

logger = logging.getLogger(__name__)


def regrade(run_dir: Path, suite: Suite, out_dir: Path) -> list[CaseResult]:
    """Every case of the run at ``run_dir`` graded again from its ferry.patch and result.json (the
    suite gives the cases' grading tests as they are now); results go to ``out_dir``.

    Only the grade, its reason and the test outcomes change: ``wall_s``, ``own_run_s`` and ``ratio``
    stay the earlier run's, measured together (an own run timed now, on another load, over a
    migration timed then would be a ratio of two different machines' moments)."""
    earlier = read_results(run_dir)
    cases = {c.name: c for c in suite.cases}
    out_dir.mkdir(parents=True, exist_ok=True)
    results_file = out_dir / RESULTS_FILE
    results_file.write_text("", encoding="utf-8")
    results: list[CaseResult] = []
    base = run_dir if run_dir.is_dir() else run_dir.parent
    for old in earlier:
        case_dir = Path(old.out_dir)
        if not case_dir.is_absolute() or not case_dir.is_dir():  # a run moved (or recorded) elsewhere
            case_dir = base / slug(old.name)
        case = cases.get(old.name)
        new = old.model_copy(deep=True)
        try:
            record = MigrationRecord.model_validate_json((case_dir / "result.json").read_text(encoding="utf-8"))
        except (OSError, ValueError, ValidationError):
            record = None
        if case is None:
            new.grade, new.reason = "failed", f"the case {old.name} is no longer in suite {suite.name}"
        elif record is None:
            pass  # it never migrated: nothing to grade again, the old result stands
        elif isinstance(case, SyntheticCase):
            work = out_dir / slug(old.name)
            work.mkdir(parents=True, exist_ok=True)
            (work / "ferry.patch").write_text((case_dir / "ferry.patch").read_text(encoding="utf-8"), encoding="utf-8")
            # the own run is timed again (it must still pass), but the ratio keeps the old run's pair:
            # the migration's wall time and the own run measured beside it (docs/evals.md, "Regrading")
            new.grade, new.reason, new.tests, _own = grade_synthetic(case, record, work)  # type: ignore[assignment]
        else:
            new.grade, new.reason, _own = grade_real(record)  # type: ignore[assignment]
        append_result(results_file, new)
        results.append(new)
    return results
