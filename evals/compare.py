"""What got better or worse between two eval runs, per case and in sum (``ferry eval --compare A B``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from evals.results import CaseResult

RANK = {"failed": 0, "partial": 1, "resolved": 2}


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

    @property
    def worse(self) -> list[Change]:
        return [c for c in self.changes if c.kind in ("worse", "removed")]

    @property
    def better(self) -> list[Change]:
        return [c for c in self.changes if c.kind in ("better", "added")]

    @property
    def regressed(self) -> bool:
        """What a CI job gates on: a case got worse or vanished, or a pass-to-pass test broke."""
        return bool(self.worse or self.p2p_regressions)


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
            for node, outcome in y.tests.pass_to_pass.items():
                if outcome != "passed" and x.tests.pass_to_pass.get(node) == "passed":
                    out.p2p_regressions.append(f"{name}: {node}")
    return out


def render(cmp: Comparison, label_a: str, label_b: str) -> str:
    lines = [f"resolved: {cmp.resolved_before} ({label_a}) -> {cmp.resolved_after} ({label_b}); "
             f"{len(cmp.better)} better, {len(cmp.worse)} worse, "
             f"{sum(c.kind == 'same' for c in cmp.changes)} unchanged; "
             f"{len(cmp.p2p_regressions)} pass-to-pass regressions"]
    for c in cmp.changes:
        if c.kind != "same" or c.detail:
            detail = f" ({c.detail})" if c.detail else ""
            lines.append(f"  {c.kind:8} {c.name}: {c.before or '-'} -> {c.after or '-'}{detail}")
    lines += [f"  p2p regression {r}" for r in cmp.p2p_regressions]
    return "\n".join(lines)
