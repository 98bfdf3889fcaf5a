"""``ferry eval --compare`` on hand-built results (subsets, time and cost deltas, exit statuses), the
timing a regrade keeps, and what a run shows while it runs (lines without a terminal, the live
table's queued rows and grading phase). No migration runs here."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest
from rich.console import Console

from agent.cli import main
from agent.migration.records import MigrationRecord
from evals import harness
from evals.cases import load_suite
from evals.compare import EXIT_COST_REGRESSION, EXIT_GRADE_REGRESSION, EXIT_SAME, compare
from evals.progress import EvalProgress, default_mode
from evals.results import CaseResult, GradedTests, read_results

HERE = Path(__file__).resolve().parent
SUITE = HERE / "suite"
RECORDED = HERE / "recorded"


def result(name: str, grade: str = "resolved", **fields: object) -> CaseResult:
    base: dict[str, object] = {"suite": "s", "name": name, "kind": "synthetic", "expected_status": "migrated",
                               "status": "migrated" if grade == "resolved" else "partial", "grade": grade,
                               "out_dir": name, "wall_s": 18.0, "own_run_s": 6.0, "ratio": 3.0,
                               "iterations": 1, "runs": 4, "cost_usd": 0.0,
                               "tests": {"fail_to_pass": {"g::f2p": "passed" if grade == "resolved" else "failed"},
                                         "pass_to_pass": {"t::p2p": "passed"}}}
    return CaseResult.model_validate({**base, **fields})


def write(path: Path, results: list[CaseResult]) -> Path:
    path.write_text("".join(r.model_dump_json() + "\n" for r in results))
    return path


def test_a_case_in_one_run_only_is_added_or_removed_and_never_a_regression(tmp_path, capsys):
    full = [result("a"), result("b"), result("c", "partial")]
    subset = [result("a"), result("d")]
    cmp = compare(full, subset)
    assert {c.name: c.kind for c in cmp.changes} == {"a": "same", "b": "removed", "c": "removed", "d": "added"}
    assert cmp.worse == [] and cmp.better == [] and not cmp.regressed and cmp.exit_code == EXIT_SAME
    assert (cmp.common, cmp.resolved_common_before, cmp.resolved_common_after) == (1, 1, 1)
    code = main(["eval", "--compare", str(write(tmp_path / "a.jsonl", full)), str(write(tmp_path / "b.jsonl", subset))])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "0 worse" in out and "2 removed" in out and "1 added" in out and "removed  b: resolved -> -" in out
    assert "of the 1 cases in both: 1 -> 1" in out and "verdict: no regression" in out
    # a grade that dropped is still a regression, whatever else is missing
    assert compare(full, [result("a", "partial")]).exit_code == EXIT_GRADE_REGRESSION


def test_time_and_cost_beyond_their_thresholds_have_their_own_exit_status(tmp_path, capsys):
    a = [result("x"), result("y", cost_usd=0.10, prompt_tokens=5000), result("z")]
    noise = [result("x", wall_s=25.0), result("y", cost_usd=0.11, prompt_tokens=5500), result("z", iterations=2)]
    assert compare(a, noise).metrics == [] and compare(a, noise).exit_code == EXIT_SAME
    b = [result("x", wall_s=57.0, ratio=9.5), result("y", cost_usd=0.13, prompt_tokens=9000),
         result("z", iterations=4, runs=8)]
    cmp = compare(a, b)
    assert not cmp.regressed and cmp.exit_code == EXIT_COST_REGRESSION == 3
    assert sorted((m.name, m.metric) for m in cmp.slower) == [
        ("x", "ratio"), ("x", "wall_s"), ("y", "cost_usd"), ("y", "tokens"), ("z", "iterations"), ("z", "runs")]
    # the way back is reported as faster and gates nothing
    back = compare(b, a)
    assert back.slower == [] and len(back.faster) == 6 and back.exit_code == EXIT_SAME
    # a grade regression wins over a slowdown
    assert compare(a, [b[0].model_copy(update={"grade": "failed"}), *b[1:]]).exit_code == EXIT_GRADE_REGRESSION
    # an unknown cost or an unmeasured ratio is no delta
    assert compare([result("x", ratio=None, cost_usd=None)], [result("x", ratio=9.0, cost_usd=5.0)]).metrics == []

    code = main(["eval", "--compare", str(write(tmp_path / "a.jsonl", a)), str(write(tmp_path / "b.jsonl", b))])
    out = capsys.readouterr().out
    assert code == 3, out
    assert "slower   x: wall_s 18.0 s -> 57.0 s (+217%)" in out and "slower   y: cost_usd $0.1000 -> $0.1300" in out
    assert "0 worse" in out and "(exit 3)" in out
    assert "the 3 cases in both, in sum: wall_s 54.0 s -> 93.0 s; median_ratio 3.00x -> 3.00x; " \
           "iterations 3 -> 6; tokens 5000 -> 9000; cost_usd $0.1000 -> $0.1300" in out
    code = main(["eval", "--json", "--compare", str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")])
    data = json.loads(capsys.readouterr().out)
    assert code == 3 and data["exit_code"] == 3 and data["regressed"] is False
    assert {"case": "x", "metric": "wall_s", "before": 18.0, "after": 57.0, "worse": True} in data["metrics"]


def test_eval_help_documents_the_exit_statuses_and_thresholds(capsys):
    with pytest.raises(SystemExit):
        from agent.cli import build_parser

        build_parser().parse_args(["eval", "--help"])
    text = capsys.readouterr().out
    assert "1 a grade regression" in text and "3 no grade regression" in text
    assert "wall_s +50% and +10 s" in text and "cost_usd +20% and +$0.01" in text


def test_regrade_keeps_the_earlier_runs_migration_and_own_run_times_together(tmp_path, monkeypatch):
    """Only the grade is new: an own run timed now over a migration timed then is no ratio."""
    run = tmp_path / "recorded"
    shutil.copytree(RECORDED, run)
    monkeypatch.setattr("evals.regrade.grade_synthetic",
                        lambda case, record, work: ("resolved", "", GradedTests(), 1.25))
    from evals.regrade import regrade

    before = {r.name: r for r in read_results(run)}
    again = {r.name: r for r in regrade(run, load_suite(SUITE), tmp_path / "regraded")}
    for name, old in before.items():
        new = again[name]
        assert new.grade == "resolved"
        assert (new.wall_s, new.own_run_s, new.ratio) == (old.wall_s, old.own_run_s, old.ratio)


def test_without_a_terminal_each_finished_case_is_one_flushed_line():
    assert default_mode(io.StringIO(), no_live=False) == "lines"

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert default_mode(Tty(), no_live=False) == "live" and default_mode(Tty(), no_live=True) == "lines"
    stream = io.StringIO()
    progress = EvalProgress(["a", "b"], mode="lines", stream=stream)
    progress("a", "started", "")
    progress("a", "step", "target")
    assert stream.getvalue() == ""
    progress("a", "finished", "resolved (migrated), 42 s")
    assert stream.getvalue() == "ferry eval [1/2] a: resolved (migrated), 42 s\n"


def test_run_suite_reports_each_case_with_grade_status_and_wall(tmp_path, monkeypatch):
    suite = load_suite(SUITE)
    monkeypatch.setattr(harness, "run_case", lambda case, *a, **k: result(case.name, wall_s=12.4))
    stream = io.StringIO()
    with EvalProgress([c.name for c in suite.cases], mode="lines", stream=stream) as progress:
        harness.run_suite(suite, tmp_path / "out", progress=progress)
    assert stream.getvalue().splitlines() == ["ferry eval [1/2] tiny_placement: resolved (migrated), 12 s",
                                              "ferry eval [2/2] tiny_unresolved: resolved (migrated), 12 s"]


def test_the_live_table_shows_queued_cases_and_the_grading_phase(tmp_path, monkeypatch):
    suite = load_suite(SUITE)
    case = next(c for c in suite.cases if c.name == "tiny_placement")
    record = MigrationRecord.model_validate_json((RECORDED / "tiny_placement" / "result.json").read_text())
    out_root = tmp_path / "out"
    seen: list[str] = []

    def fake_migrate(case, repo, out, *a, **k):
        seen.append(harness.current_step(out_root, case.name))
        (out / "ferry.patch").write_text("")
        return record, "", 9.0

    def fake_grade(case, record, out):
        seen.append(harness.current_step(out_root, case.name))
        return "resolved", "", GradedTests(), 3.0

    monkeypatch.setattr(harness, "migrate", fake_migrate)
    monkeypatch.setattr(harness, "grade_synthetic", fake_grade)
    monkeypatch.setattr(harness, "record_fixes", lambda *a: 0)
    r = harness.run_case(case, "s", out_root, "offline", harness.Prices.load(), None)
    assert r.grade == "resolved" and seen == ["", "grading: hidden tests"]
    assert harness.current_step(out_root, case.name) != "grading: hidden tests"  # the phase ends with the case

    progress = EvalProgress(["running_one", "waiting_one"], mode="live", stream=io.StringIO())
    progress("running_one", "started", "")
    progress("running_one", "step", "grading: hidden tests")
    shown = io.StringIO()
    Console(file=shown, width=200).print(progress._table())
    text = shown.getvalue()
    assert "grading: hidden tests" in text
    assert "waiting_one" in text and "queued" in text.split("waiting_one", 1)[1].splitlines()[0]


def test_ferry_eval_in_a_log_prints_a_line_per_finished_case(tmp_path, monkeypatch, capsys):
    """`ferry eval` with stderr not a terminal (capsys): the lines, not a live table drawn at the end."""
    monkeypatch.setattr(harness, "run_case", lambda case, *a, **k: result(case.name, "partial", wall_s=57.0))
    code = main(["eval", str(SUITE), "--out", str(tmp_path / "out")])
    captured = capsys.readouterr()
    assert code == 1  # partial cases did not end "migrated", their expected status
    assert captured.err.splitlines() == ["ferry eval [1/2] tiny_placement: partial (partial), 57 s",
                                         "ferry eval [2/2] tiny_unresolved: partial (partial), 57 s"]
    assert "ferry eval: 2 done" not in captured.err  # no table


def test_docs_evals_states_the_thresholds_the_code_applies():
    import re

    from evals.compare import THRESHOLDS

    docs = (HERE.parents[1] / "docs" / "evals.md").read_text()
    table = {m[0]: (float(m[1]) / 100, float(m[2]))
             for m in re.findall(r"^\s*\| `(\w+)`[^|]*\| \+(\d+)% \| \+\$?([\d.]+)", docs, flags=re.M)}
    assert table == {t.metric: (t.rel, t.abs_) for t in THRESHOLDS}
