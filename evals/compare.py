"""What got better or worse between two eval runs, per case and in sum (``ferry eval --compare A B``).

Two kinds of change, gated apart (docs/evals.md, "Comparing runs"):

- a grade regression: a case present in both runs got a lower grade, or a pass-to-pass test that
  passed in A does not pass in B (exit 1);
- a cost regression: a case present in both runs took longer (wall time, ratio to its own run), more
  fix iterations or runs, more tokens or more money, beyond the thresholds of ``THRESHOLDS`` (exit 3
  when there is no grade regression).

A case present in one run only is ``added`` or ``removed`` (a subset run, a renamed case): listed,
never a regression.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

from evals.results import CaseResult
from evals.trajectories import ToolCallDiff, tool_call_diff

RANK = {"failed": 0, "partial": 1, "resolved": 2}

EXIT_SAME = 0
EXIT_GRADE_REGRESSION = 1
EXIT_COST_REGRESSION = 3  # 2 is bad usage, as for every ferry command


@dataclass(frozen=True)
class Threshold:
    """A change counts when it is at least ``abs_`` (in the metric's unit) AND at least ``rel`` of the
    value in A (any increase from 0 that reaches ``abs_`` counts): small runs' noise stays quiet."""

    metric: str
    unit: str
    rel: float
    abs_: float
    value: Callable[[CaseResult], float | None]

    def exceeded(self, before: float, after: float) -> bool:
        grew = after - before
        return grew >= self.abs_ and (before <= 0 or grew / before >= self.rel)


def _tokens(r: CaseResult) -> float:
    return float(r.prompt_tokens + r.completion_tokens)


THRESHOLDS = (
    Threshold("wall_s", "s", 0.5, 10.0, lambda r: r.wall_s),
    Threshold("ratio", "x", 0.5, 1.0, lambda r: r.ratio),
    Threshold("iterations", "", 0.5, 2.0, lambda r: float(r.iterations)),
    Threshold("runs", "", 0.5, 2.0, lambda r: float(r.runs)),
    Threshold("tokens", "", 0.2, 1000.0, _tokens),
    Threshold("cost_usd", "$", 0.2, 0.01, lambda r: r.cost_usd),
)


def describe_thresholds() -> str:
    """The thresholds in words (for --help and the docs' table)."""
    def one(t: Threshold) -> str:
        amount = f"${t.abs_:g}" if t.unit == "$" else f"{t.abs_:g}{(' ' + t.unit) if t.unit == 's' else t.unit}"
        return f"{t.metric} +{t.rel:.0%} and +{amount}"
    return ", ".join(one(t) for t in THRESHOLDS)


@dataclass
class MetricChange:
    name: str  # the case
    metric: str
    before: float
    after: float
    unit: str = ""

    @property
    def worse(self) -> bool:
        return self.after > self.before

    def render(self) -> str:
        def fmt(v: float) -> str:
            if self.unit == "$":
                return f"${v:.4f}"
            if self.unit == "x":
                return f"{v:.2f}x"
            if self.unit == "s":
                return f"{v:.1f} s"
            return f"{v:.0f}"

        pct = f" ({(self.after - self.before) / self.before:+.0%})" if self.before > 0 else ""
        return f"{self.metric} {fmt(self.before)} -> {fmt(self.after)}{pct}"


@dataclass
class Change:
    name: str
    before: str | None  # grade in A (None: the case is new in B)
    after: str | None  # grade in B (None: the case is gone)
    detail: str = ""

    @property
    def kind(self) -> str:
        if self.before is None:
            return "added"
        if self.after is None:
            return "removed"
        delta = RANK[self.after] - RANK[self.before]
        return "better" if delta > 0 else "worse" if delta < 0 else "same"


@dataclass
class Comparison:
    changes: list[Change] = field(default_factory=list)
    resolved_before: int = 0
    resolved_after: int = 0
    p2p_regressions: list[str] = field(default_factory=list)  # "case: node" newly not passing in B
    metrics: list[MetricChange] = field(default_factory=list)  # beyond a threshold, either way
    common: int = 0  # cases in both runs
    resolved_common_before: int = 0  # of those, resolved in A
    resolved_common_after: int = 0
    sums: dict[str, tuple[float | None, float | None]] = field(default_factory=dict)  # over the cases in both
    tool_calls: list[ToolCallDiff] = field(default_factory=list)  # where the models' tool calls differ (no gate)

    def of_kind(self, kind: str) -> list[Change]:
        return [c for c in self.changes if c.kind == kind]

    @property
    def worse(self) -> list[Change]:
        """Cases in both runs whose grade dropped (a case missing from B is ``removed``, not worse)."""
        return self.of_kind("worse")

    @property
    def better(self) -> list[Change]:
        return self.of_kind("better")

    @property
    def slower(self) -> list[MetricChange]:
        """Time, iterations, runs, tokens or cost up beyond their thresholds."""
        return [m for m in self.metrics if m.worse]

    @property
    def faster(self) -> list[MetricChange]:
        return [m for m in self.metrics if not m.worse]

    @property
    def regressed(self) -> bool:
        """What a CI job gates on: a case in both runs got a lower grade, or a pass-to-pass test broke."""
        return bool(self.worse or self.p2p_regressions)

    @property
    def exit_code(self) -> int:
        if self.regressed:
            return EXIT_GRADE_REGRESSION
        return EXIT_COST_REGRESSION if self.slower else EXIT_SAME


def _metric_changes(name: str, x: CaseResult, y: CaseResult) -> list[MetricChange]:
    out = []
    for t in THRESHOLDS:
        before, after = t.value(x), t.value(y)
        if before is None or after is None:  # a ratio not measured, a cost without a price: nothing to say
            continue
        if t.exceeded(before, after) or t.exceeded(after, before):
            out.append(MetricChange(name, t.metric, before, after, t.unit))
    return out


def compare(a: list[CaseResult], b: list[CaseResult]) -> Comparison:
    before, after = {r.name: r for r in a}, {r.name: r for r in b}
    out = Comparison(resolved_before=sum(r.resolved for r in a), resolved_after=sum(r.resolved for r in b))
    for name in sorted(before.keys() | after.keys()):
        x, y = before.get(name), after.get(name)
        detail = ""
        if x is not None and y is not None and x.status != y.status:
            detail = f"status {x.status} -> {y.status}"
        if y is not None and y.reason and (x is None or x.grade != y.grade):
            detail += ("; " if detail else "") + y.reason[:200]
        out.changes.append(Change(name, x.grade if x else None, y.grade if y else None, detail))
        if x is not None and y is not None:
            out.common += 1
            out.resolved_common_before += x.resolved
            out.resolved_common_after += y.resolved
            for node, outcome in y.tests.pass_to_pass.items():
                if outcome != "passed" and x.tests.pass_to_pass.get(node) == "passed":
                    out.p2p_regressions.append(f"{name}: {node}")
            out.metrics += _metric_changes(name, x, y)
            diff = tool_call_diff(name, x.out_dir, y.out_dir)
            if diff is not None:
                out.tool_calls.append(diff)
    both = sorted(before.keys() & after.keys())
    out.sums = {key: (agg([before[n] for n in both]), agg([after[n] for n in both])) for key, agg in _SUMS.items()}
    return out


def _median_ratio(rs: list[CaseResult]) -> float | None:
    ratios = [r.ratio for r in rs if r.ratio is not None]
    return round(statistics.median(ratios), 2) if ratios else None


def _total_cost(rs: list[CaseResult]) -> float | None:
    costs = [r.cost_usd for r in rs]
    return round(sum(c for c in costs if c is not None), 4) if rs and None not in costs else None


_SUMS: dict[str, Callable[[list[CaseResult]], float | None]] = {
    "wall_s": lambda rs: round(sum(r.wall_s for r in rs), 1),
    "median_ratio": _median_ratio,
    "iterations": lambda rs: float(sum(r.iterations for r in rs)),
    "tokens": lambda rs: sum(_tokens(r) for r in rs),
    "cost_usd": _total_cost,
}


def sums_line(cmp: Comparison) -> str:
    """The cases in both runs, in sum: wall time, median ratio, iterations, tokens, cost (A -> B)."""
    def fmt(key: str, v: float | None) -> str:
        if v is None:
            return "unknown"
        return {"wall_s": f"{v:.1f} s", "median_ratio": f"{v:.2f}x", "cost_usd": f"${v:.4f}"}.get(key, f"{v:.0f}")

    return "; ".join(f"{key} {fmt(key, a)} -> {fmt(key, b)}" for key, (a, b) in cmp.sums.items())


def summary_line(cmp: Comparison, label_a: str, label_b: str) -> str:
    subset = ""
    if cmp.of_kind("added") or cmp.of_kind("removed"):
        subset = (f" (of the {cmp.common} cases in both: {cmp.resolved_common_before} -> "
                  f"{cmp.resolved_common_after})")
    return (f"resolved: {cmp.resolved_before} ({label_a}) -> {cmp.resolved_after} ({label_b}){subset}; "
            f"{len(cmp.better)} better, {len(cmp.worse)} worse, "
            f"{sum(c.kind == 'same' for c in cmp.changes)} with the same grade, {len(cmp.of_kind('added'))} added, "
            f"{len(cmp.of_kind('removed'))} removed; {len(cmp.p2p_regressions)} pass-to-pass regressions; "
            f"{len(cmp.slower)} slower or costlier, {len(cmp.faster)} faster or cheaper")


def render(cmp: Comparison, label_a: str, label_b: str) -> str:
    lines = [summary_line(cmp, label_a, label_b)]
    if cmp.common:
        lines.append(f"the {cmp.common} cases in both, in sum: {sums_line(cmp)}")
    for c in cmp.changes:
        if c.kind != "same" or c.detail:
            detail = f" ({c.detail})" if c.detail else ""
            lines.append(f"  {c.kind:8} {c.name}: {c.before or '-'} -> {c.after or '-'}{detail}")
    lines += [f"  p2p regression {r}" for r in cmp.p2p_regressions]
    lines += [f"  {'slower' if m.worse else 'faster':8} {m.name}: {m.render()}" for m in cmp.metrics]
    lines += [f"  calls    {d.render()}" for d in cmp.tool_calls]
    verdict = {EXIT_SAME: "no regression",
               EXIT_GRADE_REGRESSION: "grade regression (exit 1)",
               EXIT_COST_REGRESSION: "no grade regression; time or cost regression beyond the thresholds (exit 3)"}
    lines.append(f"verdict: {verdict[cmp.exit_code]}")
    return "\n".join(lines)


def to_json(cmp: Comparison) -> dict[str, object]:
    return {"resolved_before": cmp.resolved_before, "resolved_after": cmp.resolved_after,
            "common": cmp.common, "resolved_common_before": cmp.resolved_common_before,
            "resolved_common_after": cmp.resolved_common_after,
            "better": [c.name for c in cmp.better], "worse": [c.name for c in cmp.worse],
            "added": [c.name for c in cmp.of_kind("added")], "removed": [c.name for c in cmp.of_kind("removed")],
            "p2p_regressions": cmp.p2p_regressions, "regressed": cmp.regressed,
            "metrics": [{"case": m.name, "metric": m.metric, "before": m.before, "after": m.after,
                         "worse": m.worse} for m in cmp.metrics],
            "sums": {k: {"before": a, "after": b} for k, (a, b) in cmp.sums.items()},
            "tool_calls": [{"case": d.name, "first_difference": d.index, "before": d.before, "after": d.after,
                            "calls_before": d.calls_before, "calls_after": d.calls_after, "note": d.note}
                           for d in cmp.tool_calls],
            "exit_code": cmp.exit_code}
