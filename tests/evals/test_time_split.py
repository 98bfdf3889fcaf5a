"""Where a migration's time went: seconds per node and per run role in each case's result and the report."""

from __future__ import annotations

from pathlib import Path

from agent.migration.records import MigrationRecord
from evals.harness import _from_record, time_split
from evals.prices import Prices
from evals.report import html_report, leaderboard, node_medians
from evals.results import CaseResult


def _run(kind: str, seconds: float) -> dict[str, object]:
    return {"kind": kind, "command": ["python", "train.py"], "status": "ok", "exit_code": 0, "duration_s": seconds,
            "isolation": "bwrap"}


def _record() -> MigrationRecord:
    steps = [{"node": "scan", "seconds": 0.5}, {"node": "run_target", "seconds": 3.0},
             {"node": "fix", "seconds": 0.25}, {"node": "run_target", "seconds": 2.0}]
    runs = [_run("reference", 2.5), _run("target", 2.75), _run("target", 1.5), _run("cpu_check", 2.0)]
    return MigrationRecord.model_validate({"migration_id": "eval-x", "status": "migrated", "source": "/r",
                                           "run_command": "python train.py", "run_log": runs, "steps": steps})


def test_the_steps_are_summed_per_node_and_the_runs_per_role() -> None:
    nodes, runs = time_split(_record())
    assert nodes == {"scan": 0.5, "run_target": 5.0, "fix": 0.25}
    assert runs == {"reference": 2.5, "target": 4.25, "cpu_check": 2.0}


def test_a_case_result_carries_the_split() -> None:
    fields = _from_record(_record(), Prices(), None)
    res = CaseResult(suite="s", name="c", kind="synthetic", expected_status="migrated", grade="resolved",
                     out_dir="o", **fields)  # type: ignore[arg-type]
    back = CaseResult.model_validate_json(res.model_dump_json())
    assert back.node_s["run_target"] == 5.0 and back.run_s["target"] == 4.25


def _res(name: str, node_s: dict[str, float], run_s: dict[str, float]) -> CaseResult:
    return CaseResult(suite="s", name=name, kind="synthetic", expected_status="migrated", status="migrated",
                      grade="resolved", out_dir="o", wall_s=10.0, own_run_s=2.0, ratio=5.0, node_s=node_s,
                      run_s=run_s)


def test_the_suite_median_per_node_counts_the_cases_that_ran_it() -> None:
    results = [_res("a", {"run_target": 1.0, "scan": 0.2}, {}), _res("b", {"run_target": 3.0}, {}),
               _res("c", {"run_target": 8.0, "scan": 0.4}, {})]
    assert node_medians(results) == {"run_target": 3.0, "scan": 0.3}


def test_the_leaderboard_and_report_show_where_the_time_went(tmp_path: Path) -> None:
    results = [_res("a", {"run_target": 6.0, "scan": 0.5}, {"reference": 2.0, "target": 4.0}),
               _res("b", {"run_target": 2.0}, {"target": 1.5})]
    md = leaderboard(results)
    section = md[md.index("## Where the time went"):]
    assert "| `a` | 10.0 | 2.0 | 5.00x | run_target 6.0 s, scan 0.5 s | target 4.0 s, reference 2.0 s |" in section
    assert "Median seconds per node over the cases that ran it: run_target 4.00, scan 0.50." in section
    page = html_report(results, report_dir=tmp_path)
    assert "<section id='time'>" in page and "run_target 6.0 s, scan 0.5 s" in page


def test_tests_on_the_original_only_collected_show_as_collected_in_the_results() -> None:
    """Issue 29: where every test of the migrated code passed and none was lost, the tests on the original were
    only collected (run role ``reference_collect``): the results say so, not "0 passed"."""
    data = _record().model_dump(mode="json")
    data["run_log"].append(_run("reference_collect", 1.25))
    data["guard"] = {"tests_before_collected": {"tests": ["t.py::a", "t.py::b", "t.py::c"], "run_status": "ok"},
                     "tests_after": {"outcomes": {"t.py::a": "passed", "t.py::b": "passed", "t.py::c": "passed"}}}
    fields = _from_record(MigrationRecord.model_validate(data), Prices(), None)
    res = CaseResult(suite="s", name="c", kind="synthetic", expected_status="migrated", grade="resolved", out_dir="o",
                     wall_s=10.0, own_run_s=2.0, ratio=5.0, **fields)  # type: ignore[arg-type]
    assert res.tests_before is not None and (res.tests_before.collected, res.tests_before.ran) == (3, False)
    assert res.run_s["reference_collect"] == 1.25
    md = leaderboard([res])
    assert "| 3 collected -> 3/3 |" in md and "reference_collect 1.2 s" in md
