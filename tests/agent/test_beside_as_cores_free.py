"""Issue 29: a core that frees while the target run goes on (the reference run ends) or while the tests node waits
for the tests is taken by the round's runs that found none free when they were due (its tests, its CPU check),
instead of their waiting for the run's end and parity (agent/migration/nodes/target.py::beside_as_cores_free)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from agent.migration import adapters
from agent.migration.facade import start
from agent.migration.nodes import evidence, target
from agent.migration.options import MigrationOptions
from agent.migration.runs import RunScheduler
from agent.migration.state import runs_of, steps_of
from sandbox import hostmem
from tools.runner.models import RunResult

ROOT = Path(__file__).resolve().parents[2]


def _result() -> RunResult:
    return RunResult(command=["/bin/sh", "-c", "true"], exit_code=0, status="ok", duration_s=0.0, stdout_tail="",
                     stderr_tail="", isolation="none")


def _gated(gate: threading.Event):
    def fn(cancel: threading.Event) -> RunResult:
        gate.wait(30)
        return _result()
    return fn


@pytest.fixture
def runs():
    scheduler = RunScheduler()
    yield scheduler
    scheduler.close()


def _wait_for(predicate, timeout: float = 10.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


@pytest.mark.parametrize(("beside", "late", "clause"), [
    ([], [], ""),
    (["tests"], [], " (tests started beside it)"),
    ([], ["tests", "the CPU check"], " (tests and the CPU check started beside it as a core freed)"),
    (["tests"], ["the CPU check"], " (tests started beside it; the CPU check as a core freed)"),
])
def test_the_summary_names_what_started_beside_the_run_and_what_took_a_freed_core(
        beside: list[str], late: list[str], clause: str) -> None:
    assert target.started_clause(beside, late) == clause


def test_each_run_that_ends_beside_the_foreground_run_offers_its_core(runs: RunScheduler, monkeypatch) -> None:
    calls: list[tuple[bool, bool]] = []
    offers = iter([[], ["tests"], ["the CPU check"], []])

    def beside(state, runs_, ws, foreground=True, tests=True):
        calls.append((foreground, tests))
        return next(offers)

    monkeypatch.setattr(target, "start_beside", beside)
    first, second, after = threading.Event(), threading.Event(), threading.Event()
    runs.start("m:reference", _gated(first))
    runs.start("m:other", _gated(second))
    with target.beside_as_cores_free({}, runs, Path(".")) as late:
        assert _wait_for(lambda: len(calls) == 1)  # one look at once (a core may be free already): none is
        assert not _wait_for(lambda: len(calls) > 1, 0.3)  # nothing ended: nothing more offered
        first.set()
        assert _wait_for(lambda: late == ["tests"])
        second.set()
        assert _wait_for(lambda: late == ["tests", "the CPU check"])
        runs.start("m:late", _gated(after))
    after.set()  # the foreground run is over: a run ending now offers nothing
    assert _wait_for(lambda: not runs.running())
    time.sleep(0.2)
    assert calls == [(True, True)] * 3  # a foreground run of the caller's own holds a core; the tests may start
    assert late == ["tests", "the CPU check"]


def test_a_core_free_at_the_start_is_offered_at_once(runs: RunScheduler, monkeypatch) -> None:
    """The core left free before the watching began (the caller's own look came first, or a run ended in between)
    is offered without waiting for a run to end."""
    calls: list[bool] = []

    def beside(state, runs_, ws, foreground=True, tests=True):
        calls.append(foreground)
        return ["the CPU check"]

    monkeypatch.setattr(target, "start_beside", beside)
    gate = threading.Event()
    runs.start("m:tests-0-abc", _gated(gate))  # the awaited run, the only one in flight
    with target.beside_as_cores_free({}, runs, Path("."), waiting_for="m:tests-0-abc") as late:
        assert _wait_for(lambda: late == ["the CPU check"])
        gate.set()
        runs.join("m:tests-0-abc", Path("/nonexistent"))
    assert calls == [False]


def test_waiting_for_a_run_its_own_end_is_not_offered(runs: RunScheduler, monkeypatch) -> None:
    calls: list[tuple[bool, bool]] = []
    offers = iter([[], ["the CPU check"], [], [], []])

    def beside(state, runs_, ws, foreground=True, tests=True):
        calls.append((foreground, tests))
        return next(offers)

    monkeypatch.setattr(target, "start_beside", beside)
    other, tests = threading.Event(), threading.Event()
    runs.start("m:reference-collect", _gated(other))
    runs.start("m:tests-0-abc", _gated(tests))
    with target.beside_as_cores_free({}, runs, Path("."), waiting_for="m:tests-0-abc") as late:
        assert _wait_for(lambda: len(calls) == 1)  # the look at once
        other.set()
        assert _wait_for(lambda: late == ["the CPU check"])
        # no run of the caller's own (one free core is enough), and never the awaited tests themselves
        assert calls == [(False, False), (False, False)]
        runs.start("m:third", _gated(other))  # (ends at once: the gate is open)
        assert _wait_for(lambda: len(calls) == 3)
        calls.clear()
        third = threading.Event()
        runs.start("m:fourth", _gated(third))
        tests.set()  # the awaited run ends: its result decides what is next, no core is offered for it
        runs.join("m:tests-0-abc", Path("/nonexistent"))
        time.sleep(0.3)  # (still watching, m:fourth in flight)
        assert calls == []
    third.set()
    assert _wait_for(lambda: not runs.running())
    time.sleep(0.2)
    assert calls == []


@pytest.mark.slow
def test_the_tests_take_the_reference_runs_core_as_it_ends_during_the_target_run(tmp_path: Path,
                                                                                 monkeypatch) -> None:
    """Two run slots, no evidence run (as for an autocast program): the reference run holds the second slot when the
    target run starts, so the tests cannot start beside it then; they start when the reference run ends, while the
    target run still goes on. mlp_training's first parity fails (tpx's bf16 matmuls): those tests are cancelled at
    once (never collected), so the next round's tests take their core beside the precision trial's run, and the
    tests node collects them instead of running them itself."""
    import shutil

    from agent.migration.state import iteration_of

    monkeypatch.setenv(hostmem.PARALLEL_ENV, "2")
    monkeypatch.setenv(evidence.SWITCH_ENV, "0")
    tests_started = threading.Event()
    real_tests, real_run = target._run_tests, adapters.run
    target_spans: list[tuple[bool, bool]] = []  # (tests started before the target run ended, at its start)
    dropped: list[float] = []  # how long the first round's tests waited to be cancelled
    next_tests: list[float] = []  # when the next round's tests started
    trial_ends: list[float] = []  # when the precision trial's run (the FIX008 code, probed and profiled) ended

    def tests(state, ws, adir, cancel):
        tests_started.set()
        if iteration_of(state) == 0:  # held until cancelled (the old code: at the next round's target run)
            t0 = time.monotonic()
            cancel.wait(60)
            dropped.append(time.monotonic() - t0)
            return RunResult(command=["/bin/sh", "-c", "pytest"], exit_code=None, status="cancelled",
                             duration_s=0.0, stdout_tail="", stderr_tail="cancelled", isolation="none")
        next_tests.append(time.monotonic())
        return real_tests(state, ws, adir, cancel)

    def run(ws, command, **kw):
        if kw.get("device") != "tpx" or not kw.get("profile"):
            return real_run(ws, command, **kw)
        if "cause-" in str(kw.get("artifacts_dir")):
            result = real_run(ws, command, **kw)
            trial_ends.append(time.monotonic())
            return result
        at_start = tests_started.is_set()
        result = real_run(ws, command, **kw)
        # the reference run is shorter than the target run, but not always on a busy machine: hold the run's
        # end until the tests started (never, without the watching: then the summaries below tell)
        tests_started.wait(120)
        target_spans.append((tests_started.is_set(), at_start))
        return result

    monkeypatch.setattr(target, "_run_tests", tests)
    monkeypatch.setattr(adapters, "run", run)
    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "evals" / "suite" / "mlp_training" / "repo", repo,
                    ignore=shutil.ignore_patterns("__pycache__"))
    opts = MigrationOptions(source=str(repo), run_command="python train.py --steps 8", state_dir=str(tmp_path / "s"),
                            test_command="python -m pytest -q tests")
    done = start(opts, migration_id="freed")
    assert done.status == "migrated", done.summary
    assert target_spans and target_spans[0] == (True, False), target_spans  # started during the run, not at its start
    summaries = {s.node: s.summary for s in steps_of(done.values)}
    first_target = next(s.summary for s in steps_of(done.values) if s.node == "target_run")
    assert "tests started beside it as a core freed" in first_target, first_target
    assert "beside the target run" in summaries["tests"], summaries["tests"]  # the FIX008 round's, beside the trial
    assert [r.kind for r in runs_of(done.values)].count("tests") == 1
    assert len(dropped) == 1 and dropped[0] < 30, dropped
    # the FIX008 round's tests started beside the trial's run (before its end), not at that round's target run
    assert next_tests and trial_ends and next_tests[0] < trial_ends[0], (next_tests, trial_ends)
