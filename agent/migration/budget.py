"""The migration's wall-time budget (``--max-wall``): how long a run may take, and when not to start one.

Without a budget every run gets ``--run-timeout``. With one, a run's timeout is also capped by the
time left, and a run that cannot finish in that time is not started: when a run of the same kind
(or, before the first target run, the reference run) already took longer than the time left, the
migration ends ``failed_budget`` at once, saying so, with its report written, instead of starting a
run that the caller (a CI job, the eval harness, the service) would kill halfway with nothing saved.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from agent.errors import BudgetExhausted
from agent.migration.records import RunRole
from agent.migration.state import State, elapsed_of, options_of, runs_of

logger = logging.getLogger(__name__)

MIN_RUN_S = 1.0  # a run's timeout is never below this (the runner needs a positive limit)
# a run of each role is expected to take about as long as the runs it follows: the same role's
# last run, else the first of these that ran (the probed reference run is the closest stand-in for
# a probed target run; the tests and checks have their own)
_LIKE: dict[RunRole, tuple[RunRole, ...]] = {
    "target": ("target", "reference"),
    "profile": ("profile", "target", "reference"),
    "tests": ("tests",),
    "reference_tests": ("reference_tests", "tests"),
    "reference_collect": ("reference_collect",),
    "cpu_check": ("cpu_check", "reference"),
    "cpu_original": ("cpu_original", "reference"),
    "reference": ("reference",),
    "cause_trial": ("cause_trial", "target", "reference"),
    # no caller asks for these two yet, but RunRole names them: an estimate, never a KeyError. The fp32 golden
    # run takes what the reference takes (agent.migration.nodes.golden); an evidence run (status 'ended' when
    # the probe ended it, so rarely 'ok') at most what a full target run does
    "golden": ("golden", "reference"),
    "evidence": ("evidence", "target", "reference"),
}


def time_left(state: State) -> float | None:
    """Seconds of ``--max-wall`` the migration has left (None: no budget)."""
    budget = options_of(state).max_wall_s
    if budget is None:
        return None
    return budget - elapsed_of(state)


def run_timeout(state: State) -> float:
    """The timeout of the next run: ``--run-timeout``, capped by the budget left."""
    return Clock.of(state).timeout()


@dataclass(frozen=True)
class Clock:
    """The budget as a node spends it: ``state['elapsed_s']`` moves only when a node ends, so a node that
    makes several runs (the CPU check and the original on CPU, the model's fixes) reads the time left from
    this clock, started when the node starts."""

    run_timeout_s: float
    max_wall_s: float | None
    end: float | None  # time.monotonic() at which the budget is spent

    @classmethod
    def of(cls, state: State) -> Clock:
        opts, left = options_of(state), time_left(state)
        return cls(opts.run_timeout_s, opts.max_wall_s, None if left is None else time.monotonic() + left)

    def left(self) -> float | None:
        return None if self.end is None else self.end - time.monotonic()

    def timeout(self) -> float:
        """The next run's timeout: ``--run-timeout`` or, when it is smaller, the time left."""
        left = self.left()
        return self.run_timeout_s if left is None else max(MIN_RUN_S, min(self.run_timeout_s, left))

    def capped(self, timeout_s: float) -> bool:
        """Whether a run given ``timeout_s`` was limited by the budget, not by ``--run-timeout``."""
        return self.max_wall_s is not None and timeout_s < self.run_timeout_s

    def stopped(self, what: str, ran_s: float) -> BudgetExhausted:
        """The error for a run (``what``) that the budget's cap stopped after ``ran_s`` seconds."""
        return BudgetExhausted(
            f"wall-time budget: {what} used the last {ran_s:.0f}s of --max-wall {self.max_wall_s or 0:.0f}s and was "
            "stopped; run the migration again with a larger --max-wall, or make the run shorter (fewer steps)")


def expected_run_s(state: State, role: RunRole) -> tuple[float, str] | None:
    """How long a run of ``role`` will likely take (and which earlier run says so), or None when nothing like it
    has run yet."""
    runs = runs_of(state)
    for like in _LIKE[role]:
        done = [r for r in runs if r.kind == like and r.status == "ok"]
        if done:
            return done[-1].duration_s, f"the last {like} run"
    return None


def has_time_for(state: State, role: RunRole) -> bool:
    """Whether the budget left (if any) covers a run of ``role`` as long as the last one like it."""
    left = time_left(state)
    if left is None:
        return True
    expected = expected_run_s(state, role)
    return left >= MIN_RUN_S and (expected is None or expected[0] <= left)


def ensure_time_for(state: State, role: RunRole, what: str) -> None:
    """Raise ``BudgetExhausted`` when ``--max-wall`` leaves less time than the run of ``role`` (``what``, for the
    message) is expected to take."""
    if has_time_for(state, role):
        return
    left = time_left(state) or 0.0
    budget = options_of(state).max_wall_s or 0.0
    expected = expected_run_s(state, role)
    took = f"; {expected[1]} took {expected[0]:.0f}s" if expected is not None else ""
    logger.info("not starting %s: %.0fs of the budget left%s", what, left, took)
    raise BudgetExhausted(
        f"wall-time budget: {max(left, 0.0):.0f}s of --max-wall {budget:.0f}s left{took}, so {what} would not "
        "finish and was not started; run the migration again with a larger --max-wall, or make the run "
        "shorter (fewer steps)")
