"""Gradients and optimizer state of the first optimizer steps: which one diverges first, and on which rank.

The probe records each parameter's gradient just before an optimizer's step n, and the optimizer's state
and the parameter's value just after it (``grad``, ``optim_state``, ``param_after`` events; see
tools/probe/grads.py). compare_dumps judges them like any tensor (docs/numerics.md's chain); this module picks
the first divergent one and says what it means (docs/parity.md, "Gradients and optimizer state"):

- **Backward order.** Of the failing gradients of the earliest optimizer step, the one nearest to the
  loss: its module's first call comes last in the forward pass. Autograd computes that gradient first,
  and a wrong gradient flows into every parameter before it in the forward pass, so the latest failing
  module in forward order is where the backward drift is born.
- **Backward or update.** Where the forward pass of that step matched and the gradients do not, the
  backward pass differs; where the gradients matched and the optimizer state or the updated parameters
  do not, the optimizer's update differs.
- **Ranks.** A distributed run leaves rank N's dump in ``rank-N/``; each rank's gradients are compared
  with the same rank of the reference (a missing all-reduce leaves each rank its local gradients).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from tools.parity.models import (
    Divergence,
    GradientDivergence,
    GradientKind,
    ModuleComparison,
    RankGradients,
    TensorComparison,
)
from tools.parity.ranks import rank_dumps
from tools.parity.verdicts import Verdict
from tools.probe.dump import ProbeDump

GRADIENT_KINDS: tuple[GradientKind, ...] = ("grad", "optim_state", "param_after")
UPDATE_KINDS = ("optim_state", "param_after")

#: compares one key of the reference dump with the target dump (compare.py's judgement)
CompareKey = Callable[[ProbeDump, ProbeDump, str], TensorComparison]


def _forward_positions(ref: ProbeDump) -> dict[str, int]:
    """Module path -> position of its first call in the forward pass (where the call starts: its first
    recorded input; a call without recorded inputs by where it ends)."""
    starts: dict[str, int] = {}
    ends: dict[str, int] = {}
    for e in ref.events:
        module = e.get("module")
        if module is None:
            continue
        if e.get("kind") == "module_input":
            starts.setdefault(module, e["seq"])
        elif e.get("kind") == "module_end":
            ends.setdefault(module, e["seq"])
    return {**ends, **starts}


def _first(rows: Iterable[TensorComparison], kinds: tuple[str, ...], ref: ProbeDump,
           rank: int) -> GradientDivergence | None:
    """The first failing row of ``kinds``: the earliest optimizer step, then backward order."""
    failing = [t for t in rows if t.kind in kinds and t.verdict == "fail" and t.step is not None]
    if not failing:
        return None
    step = min(t.step for t in failing if t.step is not None)
    in_step = [t for t in failing if t.step == step]
    positions = _forward_positions(ref)

    def seq(t: TensorComparison) -> int:
        ev = ref.tensor_events.get(t.key)
        return ev["seq"] if ev is not None else 0

    def nearest_to_loss(t: TensorComparison) -> tuple[int, int]:
        pos = positions.get(t.module or "")
        # a module the forward pass did not record ranks before every recorded one, by registration order;
        # of one module's parameters the first registered (a Linear's weight before its bias)
        return (-1, seq(t)) if pos is None else (pos, -seq(t))

    chosen = max(in_step, key=nearest_to_loss)
    ev = ref.tensor_events.get(chosen.key)
    param = (ev.get("param") if ev is not None else None) or chosen.module or chosen.key
    kind: GradientKind = "grad" if chosen.kind == "grad" else (
        "optim_state" if chosen.kind == "optim_state" else "param_after")
    return GradientDivergence(param=param, module=chosen.module or param, step=step, rank=rank, kind=kind,
                              comparison=chosen, failing=len(in_step))


def _rank_rows(ref: ProbeDump, tgt: ProbeDump | None, compare: CompareKey) -> list[TensorComparison]:
    keys = sorted((e for e in ref.tensor_events.values() if e.get("kind") in GRADIENT_KINDS), key=lambda e: e["seq"])
    if tgt is None:
        return [TensorComparison(key=e["key"], kind=e["kind"], module=e.get("module"), step=e.get("step"),
                                 leaf=e.get("leaf"), verdict="fail", tier="missing",
                                 reason="the target run left no dump for this rank") for e in keys]
    return [compare(ref, tgt, e["key"]) for e in keys]


@dataclass
class GradientFindings:
    """What the gradients and optimizer state of the recorded optimizer steps say."""

    gradient: GradientDivergence | None = None
    update: GradientDivergence | None = None
    ranks: list[RankGradients] = field(default_factory=list)
    forward_matched: bool = False  # the forward pass of the diverging step matched (module outputs)

    @property
    def other_rank_fails(self) -> bool:
        """A rank other than 0 (which the report's tensors hold) has a failing gradient or update."""
        return any(r.failing for r in self.ranks if r.rank != 0)

    def verdict(self, verdict: Verdict) -> Verdict:
        return "fail" if self.other_rank_fails else verdict

    def explain(self, divergence: Divergence | None, module_classes: dict[str, str]) -> Divergence | None:
        """The divergence with what the gradients say, where the forward pass of their step matched."""
        found = self.gradient or self.update
        if found is None or not self.forward_matched:
            return divergence
        on = f" on rank {found.rank}" if found.rank else ""
        if self.gradient is not None:
            text = (f"the forward pass of step {found.step} matched but its gradients differ{on}: the backward pass "
                    f"differs (first divergent gradient, in backward order: {found.describe()}, module {found.module})")
        else:
            text = (f"the gradients of step {found.step} matched but the optimizer's update differs{on} (first: "
                    f"{found.describe()}): a different learning rate or optimizer setting, or a skipped or "
                    "repeated step")
        if divergence is None:
            return Divergence(key=found.comparison.key, module=found.module, step=found.step,
                              module_class=module_classes.get(found.module), inputs="pass",
                              likely_cause="computation", explanation=text, output=found.comparison)
        return divergence.model_copy(update={"explanation": f"{divergence.explanation}; {text}"})

    def summarise(self, summary: str) -> str:
        if self.gradient is not None:
            summary += f"; first divergent gradient: {self.gradient.describe()}"
        elif self.update is not None:
            summary += f"; gradients match, first divergent optimizer update: {self.update.describe()}"
        if self.other_rank_fails and not any(r.failing for r in self.ranks if r.rank == 0):
            bad = [str(r.rank) for r in self.ranks if r.failing]
            summary = f"the target's gradients differ on rank(s) {', '.join(bad)}; " + summary
        return summary

    def notes(self) -> list[str]:
        if len(self.ranks) < 2:
            return []
        return [f"gradients and optimizer state, rank {r.rank}: " + (
            f"{r.failing} of {r.compared} differ, first {r.first}" if r.failing else f"{r.compared} match")
            for r in self.ranks]


def gradient_findings(tensors: list[TensorComparison], modules: list[ModuleComparison], ref: ProbeDump,
                      ref_dir: Path | str, target_dir: Path | str, compare: CompareKey) -> GradientFindings:
    """The first divergent gradient and optimizer update over every rank (rank 0: ``tensors``, already
    compared; rank N: ``rank-N/`` of both runs, compared here with ``compare``)."""
    per_rank: dict[int, tuple[ProbeDump, list[TensorComparison]]] = {0: (ref, tensors)}
    ref_ranks = rank_dumps(ref_dir) if any(p.name.startswith("rank-") for p in _children(ref_dir)) else {}
    if len(ref_ranks) > 1:
        tgt_ranks = rank_dumps(target_dir)
        for rank, dump in ref_ranks.items():
            if rank != 0:
                per_rank[rank] = (dump, _rank_rows(dump, tgt_ranks.get(rank), compare))
    found = GradientFindings()
    grads: list[GradientDivergence] = []
    updates: list[GradientDivergence] = []
    for rank, (dump, rows) in sorted(per_rank.items()):
        own = [t for t in rows if t.kind in GRADIENT_KINDS]
        g = _first(own, ("grad",), dump, rank)
        u = _first(own, UPDATE_KINDS, dump, rank)
        if g is not None:
            grads.append(g)
        if u is not None:
            updates.append(u)
        if len(per_rank) > 1:
            first = g or u
            failing = sum(t.verdict == "fail" for t in own)
            found.ranks.append(RankGradients(rank=rank, compared=len(own), failing=failing,
                                             first=first.describe() if first else None))
    found.gradient = min(grads, key=lambda d: (d.step, d.rank), default=None)
    first_update = min(updates, key=lambda d: (d.step, d.rank), default=None)
    if first_update is not None and not any(g.step <= first_update.step for g in grads):
        found.update = first_update
    diverging = found.gradient or found.update
    if diverging is not None:
        found.forward_matched = all(m.output_verdict != "fail" for m in modules
                                    if m.step is not None and m.step <= diverging.step)
    return found


def _children(path: Path | str) -> list[Path]:
    try:
        return list(Path(path).iterdir())
    except OSError:
        return []
