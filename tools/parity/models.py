"""Pydantic models of the parity tools (ParityReport, CheckRequest/CheckResult)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from tools.parity.tolerances import Tolerances
from tools.parity.verdicts import TensorMetrics, Tier, Verdict
from tools.profile.models import ProfileReport

LikelyCause = Literal[
    "matmul_precision", "reduction_order", "dtype", "cpu_fallback", "input_data", "computation", "unknown"
]


class CompareOptions(BaseModel):
    golden_dir: Path | None = Field(None, description="fp32 CPU golden dump for the error-ratio check")
    include_inputs: bool = True
    include_scalars: bool = True
    include_records: bool = True
    drift_budget: bool = Field(
        True, description="judge the later steps of a training run that the strict tiers fail by the drift budget "
                          "(docs/parity.md); False: every step strictly (a side run that explains a drift)")
    dtype_changes: dict[str, str] = Field(
        default_factory=dict,
        description="dtypes the migration itself changed, reference dtype -> target dtype (float64 -> float32): "
                    "such a pair is no dtype mismatch but compared at the tier of the dtype the target computes in")


class TensorComparison(BaseModel):
    key: str
    kind: str
    module: str | None = None
    call: int | None = None
    leaf: str | None = None
    step: int | None = None
    verdict: Verdict
    tier: Tier
    reason: str
    ref_shape: list[int] | None = None
    target_shape: list[int] | None = None
    ref_dtype: str | None = None
    target_dtype: str | None = None
    target_device: str | None = None
    metrics: TensorMetrics | None = None
    tolerances: Tolerances | None = None


class ModuleComparison(BaseModel):
    """One module call, in execution (completion) order."""

    order: int
    key: str
    module: str
    call: int
    step: int | None = None
    module_class: str | None = None
    input_verdict: Verdict | Literal["none"]
    output_verdict: Verdict | Literal["none"]
    max_abs: float | None = None
    max_rel: float | None = None
    cosine: float | None = None


class Divergence(BaseModel):
    """Where drift is born: the first module whose inputs agree and outputs do not."""

    key: str
    module: str
    call: int | None = None
    step: int | None = None
    module_class: str | None = None
    inputs: Verdict | Literal["none"]
    likely_cause: LikelyCause
    explanation: str
    ops: list[str] = Field(default_factory=list)
    output: TensorComparison

    def describe(self) -> str:
        """``key (likely cause)``: where the drift starts, in one phrase."""
        return f"{self.key} (likely {self.likely_cause})"


GradientKind = Literal["grad", "optim_state", "param_after"]


class GradientDivergence(BaseModel):
    """The first divergent gradient (or, when every gradient matched, optimizer update) of an optimizer
    step, in backward order: of the failing parameters, the one whose module ran last in the forward pass,
    i.e. the nearest to the loss (docs/parity.md, "Gradients and optimizer state")."""

    param: str = Field(description="the parameter's name (root class + qualified name, or optimizer-based)")
    module: str = Field(description="the module path the parameter belongs to")
    step: int = Field(description="the optimizer's step index")
    rank: int = Field(0, description="the rank whose dump diverges (0 for a single process)")
    kind: GradientKind
    comparison: TensorComparison
    failing: int = Field(1, description="how many tensors of this kind and step fail on that rank")

    def describe(self) -> str:
        """``Net.fc2.weight (max abs 0.012)``, the state's name for optimizer state, the rank where distributed."""
        what = self.param
        if self.kind == "optim_state":
            what += f" {self.comparison.leaf}"
        elif self.kind == "param_after":
            what += " value after the update"
        m = self.comparison.metrics
        how = f"max abs {m.max_abs:.3g}" if m is not None else self.comparison.tier
        where = f", rank {self.rank}" if self.rank else ""
        return f"{what} (step {self.step}{where}, {how})"


class RankGradients(BaseModel):
    """One rank's gradients and optimizer state, reference against the same rank of the target."""

    rank: int
    compared: int = 0
    failing: int = 0
    first: str | None = Field(None, description="the rank's first divergent gradient or update, described")


class GoldenSummary(BaseModel):
    """What the fp32 golden run decided (docs/numerics.md's error ratio R = ||target - golden|| /
    ||reference - golden||: <= 1.2 pass, <= 2 warn, worse fail)."""

    golden_dir: str
    with_ratio: int = Field(0, description="compared tensors the golden run had a counterpart for")
    decided: int = Field(0, description="tensors the earlier tiers did not pass, judged by the error ratio too "
                                        "(the others passed before it)")
    decided_fail: int = Field(0, description="of those, the ones that fail even by the error ratio")
    max_ratio: float | None = Field(None, description="the largest ratio among the tensors it judged")
    same_as_reference: int = Field(0, description="tensors whose golden counterpart equals the reference (no "
                                                  "autocast changed them): no ratio, judged by the other tiers")

    def describe(self) -> str:
        same = (f"; {self.same_as_reference} tensor(s) equal their golden counterpart in the reference (no "
                "reduced precision to measure against), judged without the ratio" if self.same_as_reference else "")
        return self._describe() + same

    def _describe(self) -> str:
        if not self.decided:
            return (f"fp32 golden run (autocast off): {self.with_ratio} tensor(s) had a golden counterpart, "
                    "none needed the error ratio")
        worst = f"{self.max_ratio:.3g}" if self.max_ratio is not None else "n/a"
        failed = f", {self.decided_fail} failed by it" if self.decided_fail else ""
        return (f"fp32 golden run (autocast off): {self.decided} tensor(s) judged by the error ratio "
                f"||target-golden||/||reference-golden|| (largest {worst}; pass <= 1.2, warn <= 2){failed}")


class DriftSummary(BaseModel):
    """What the drift budget of a training run did (tools/parity/drift.py): step 0 is judged strictly, a
    later step's tensor the tiers fail by its relative error against
    min(growth * max(e0, dtype floor) * (step + 1), cap)."""

    growth: float
    cap: float
    e0: float = Field(0.0, description="the largest relative error ||t-r||/||r|| among the step-0 tensors")
    e0_key: str | None = None
    step0_tensors: int = 0
    step0_failed: int = 0
    ref_steps: int | None = Field(None, description="optimizer steps of the whole reference run")
    target_steps: int | None = None
    judged: int = Field(0, description="later-step tensors the strict tiers did not pass, judged by the budget")
    within: int = 0
    over: int = 0
    first_over: str | None = None
    worst_key: str | None = Field(None, description="the budget-passed tensor closest to its budget")
    worst_eps: float | None = None
    worst_budget: float | None = None
    worst_ratio: float | None = None
    curves_judged: int = 0
    curves_within: int = 0
    curve_band: float | None = Field(None, description="the widest band a printed curve was judged with")
    note: str | None = None

    @property
    def used(self) -> bool:
        """Whether the budget passed anything the strict tiers did not."""
        return self.within > 0 or self.curves_within > 0

    def describe(self) -> str:
        if self.note:
            return self.note
        if not self.judged and not self.curves_judged:
            return "training: every later step within the strict tiers (no drift budget needed)"
        parts = [f"step 0 matches (largest relative error {self.e0:.2g})"]
        if self.judged:
            worst = (f", closest {self.worst_eps:.2g} of {self.worst_budget:.2g} at {self.worst_key}"
                     if self.worst_key else "")
            parts.append(f"{self.within} of {self.judged} later-step tensor(s) within the drift budget{worst}")
        if self.curves_judged:
            parts.append(f"{self.curves_within} of {self.curves_judged} printed curve(s) within the drift band "
                         f"(up to {self.curve_band or 0:.2%} at their last step)")
        if self.over:
            parts.append(f"{self.over} beyond it (first {self.first_over})")
        return "training: " + "; ".join(parts)


CauseId = Literal["matmul_precision", "autocast", "rng"]


class CauseTrial(BaseModel):
    """One measured candidate explanation of a parity failure: the migrated code run again on tpx with
    the candidate's settings (added to those of the candidates before it) and compared with
    the reference, or with the fp32 golden run where autocast is switched off."""

    cause: CauseId
    setting: str = Field(description="what the side run changed, in words")
    env: dict[str, str] = Field(description="the side run's TPX_* settings: this candidate's and those of the "
                                            "candidates before it")
    against: Literal["reference", "golden"] = Field(description="the dump the side run was compared with")
    run_status: str = "ok"
    verdict: Verdict | Literal["run_failed"] = "run_failed"
    before_key: str | None = Field(None, description="the default run's first divergence (or first failing key)")
    before_max_abs: float | None = None
    after_key: str | None = Field(None, description="the side run's first divergence, None when it passes")
    after_max_abs: float | None = Field(None, description="max abs of the side run at before_key")
    fails_before: int = 0
    fails_after: int | None = None
    summary: str = ""
    drift: bool = Field(False, description="the side run measured the drift of a parity the drift budget passed "
                                           "(compared strictly), not a failure")

    @property
    def moved(self) -> bool:
        """The side run took the default run's first divergence away, but parity still fails elsewhere."""
        return (not self.removed and self.verdict != "run_failed" and self.after_key is not None
                and self.before_key is not None and self.after_key != self.before_key)

    @property
    def removed(self) -> bool:
        """The side run passes parity: the candidate (with those before it) explains the divergence."""
        return self.verdict in ("pass", "warn")

    def describe(self) -> str:
        """One measured sentence: what the side run changed and what became of the divergence."""
        where = self.before_key or "the failing tensors"
        if self.verdict == "run_failed":
            return f"with {self.setting} the side run did not finish ({self.run_status}): nothing measured"
        change = (f"max abs {_num(self.before_max_abs)} -> {_num(self.after_max_abs)}"
                  if self.before_max_abs is not None and self.after_max_abs is not None else
                  f"{self.fails_before} -> {self.fails_after} failing tensor(s)")
        if self.drift:
            if self.removed:
                return f"with {self.setting} the later steps' drift ({where}) disappears: {change}"
            return f"with {self.setting} the later steps' drift ({where}) remains: {change}"
        if self.removed:
            return f"with {self.setting} the first divergence ({where}) disappears: {change}"
        if self.after_key and self.after_key != self.before_key:
            return (f"with {self.setting} the divergence at {where} goes ({change}) but parity still fails: the "
                    f"first divergence is then {self.after_key}")
        return f"with {self.setting} the divergence at {where} remains: {change}"


def _num(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2g}"


def removing_trial(trials: list[CauseTrial]) -> CauseTrial | None:
    """The last side run that removed the divergence (its settings are what explain it), if any."""
    return next((t for t in reversed(trials) if t.removed), None)


class ParityReport(BaseModel):
    verdict: Verdict
    summary: str
    ref_dir: str
    target_dir: str
    golden_dir: str | None = None
    golden: GoldenSummary | None = None
    counts: dict[str, int]
    first_divergence: Divergence | None = None
    first_warning: TensorComparison | None = None
    first_divergent_gradient: GradientDivergence | None = Field(
        None, description="of the earliest optimizer step whose gradients differ, the failing gradient nearest to the "
                          "loss (backward order), on the first rank where one differs")
    first_divergent_update: GradientDivergence | None = Field(
        None, description="when the gradients of that step match: the first differing optimizer state or updated "
                          "parameter (the optimizer's update differs)")
    gradient_ranks: list[RankGradients] = Field(default_factory=list, description="per rank, for a distributed run")
    modules: list[ModuleComparison]
    tensors: list[TensorComparison]
    scalars: list[TensorComparison]
    missing_in_target: list[str] = Field(default_factory=list)
    extra_in_target: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    target_meta: dict[str, Any] = Field(default_factory=dict)
    dtype_changes_compared: dict[str, int] = Field(
        default_factory=dict,
        description="the migration's dtype changes this report compared at the target dtype's tier, and how many "
                    "tensors each covered, e.g. {'float64 -> float32': 12}")
    drift: DriftSummary | None = Field(None, description="the drift budget of a training run's later steps "
                                                            "(None: the program steps no optimizer)")
    trials: list[CauseTrial] = Field(default_factory=list, description="candidate causes measured in side runs, "
                                                                       "cheapest first")
    drift_measured: bool | None = Field(
        None, description="a pass the drift budget made: whether side runs measured where the admitted drift "
                          "comes from (False: not measured, since they cannot change a passing verdict; None: no "
                          "drift budget used, or a report from before this field)")
    explained_by: list[CauseId] = Field(
        default_factory=list,
        description="a failing default run whose divergence a side run removed entirely with settings that change "
                    "no computation of the program (autocast off on both sides, random draws aligned): the "
                    "migrated code computes what the original does; the drift is that setting's")

    @property
    def explanation(self) -> CauseTrial | None:
        """The side run that explains a failing default run (``explained_by``), if any."""
        return removing_trial(self.trials) if self.explained_by else None

    @property
    def compared(self) -> bool:
        """Whether anything was compared at all (``skipped``: the program ran no module, printed no
        metric and recorded nothing, so there is no evidence either way)."""
        return self.verdict != "skipped"

    @property
    def passed(self) -> bool:
        """Parity holds: every comparison passed or stayed within its warning tolerance, or a measured side
        run explains the default run's divergence (``explained_by``). False for a report with nothing
        compared: no evidence is not a pass (see ``compared``)."""
        return self.verdict in ("pass", "warn") or (self.verdict == "fail" and self.explanation is not None)

    @property
    def failed(self) -> bool:
        """Parity was checked and does not hold."""
        return self.verdict == "fail" and self.explanation is None

    def worst(self) -> TensorComparison | None:
        """The compared tensor farthest from the reference (largest max abs), failing ones first."""
        judged = [t for t in self.rows() if t.metrics is not None]
        failing = [t for t in judged if t.verdict == "fail"] or judged
        return max(failing, key=lambda t: t.metrics.max_abs if t.metrics is not None else 0.0, default=None)

    def curves(self) -> str:
        """The printed streams (loss curves), each as its largest relative difference ("loss within 0.3%")."""
        parts = []
        for t in self.scalars:
            if t.metrics is None:
                parts.append(f"{t.key.removeprefix('scalar:')} {t.verdict} ({t.tier})")
            else:
                parts.append(f"{t.key.removeprefix('scalar:')} curve within {t.metrics.max_rel:.2%}"
                             + ("" if t.verdict in ("pass", "warn") else " (fails)"))
        return ", ".join(parts)

    def headline(self) -> str:
        """One line first: the verdict, how many tensors, the worst one, the loss curves; for a failure
        explained by a side run, what was measured."""
        if not self.compared:
            return "parity: not shown (nothing was compared)"
        n = len(self.rows())
        worst = self.worst()
        where = (f", worst max abs {worst.metrics.max_abs:.2g} at {worst.key}"
                 if worst is not None and worst.metrics is not None else "")
        curves = self.curves()
        tail = f", {curves}" if curves else ""
        trial = self.explanation
        if trial is not None:
            return (f"parity: pass as measured, {n} tensors; the default run fails ({self.counts.get('fail', 0)} "
                    f"tensors{where}) and {trial.describe()}")
        if self.drift is not None and self.drift.used:
            tail += (f", later steps within the drift budget (closest {self.drift.worst_eps:.2g} of "
                     f"{self.drift.worst_budget:.2g} at {self.drift.worst_key})" if self.drift.worst_key else
                     ", printed curves within the drift band")
        if self.verdict in ("pass", "warn"):
            word = "pass" if self.verdict == "pass" else "pass within the warning tolerance"
            measured = f"; measured: {self.measured()}" if self.trials else ""
            if self.drift_measured is False:
                measured += "; where the drift comes from was not measured (--explain-drift)"
            return f"parity: {word}, {n} tensors{where}{tail}{measured}"
        return (f"parity: fail, {self.counts.get('fail', 0)} of {n} tensors, first divergence "
                f"{self.divergence_text()}{where}{tail}")

    def measured(self) -> str:
        """The side runs' measurements, one sentence each ("" when none ran)."""
        return "; ".join(t.describe() for t in self.trials)

    def divergence_text(self) -> str:
        """Where the first failing tensor is, in words (for summaries and reports): the cause measured by
        a side run where one ran, the localiser's guess ("likely") only where nothing was tested."""
        if self.first_divergence is not None and self.trials:
            return f"{self.first_divergence.key} (measured: {self.measured()})"
        if self.first_divergence is not None:
            return self.first_divergence.describe()
        failing = next((t.key for t in [*self.tensors, *self.scalars] if t.verdict == "fail"), None)
        return f"not localised to a module (first failing probe key: {failing})" if failing else "not localised"

    def rows(self) -> list[TensorComparison]:
        """Every per-tensor comparison: module tensors, then printed scalars."""
        return [*self.tensors, *self.scalars]


class CheckRequest(BaseModel):
    path: Path
    command: str | list[str]
    out_dir: Path | None = None
    steps: int = Field(2, ge=1)
    seed: int = 0
    timeout_s: float = 600.0
    profile: bool = True
    env: dict[str, str] = Field(default_factory=dict, description="FERRY_*/TPX_* settings for both runs")
    target_env: dict[str, str] = Field(default_factory=dict, description="extra FERRY_*/TPX_* for the target run only")
    disk_limit_bytes: int | None = Field(default=None, ge=1024**2,
                                         description="disk cap of each run, in all (None: $FERRY_DISK_LIMIT or "
                                                     "what the host can back)")
    python: Path | None = Field(default=None, description="the interpreter both runs use (None: Ferry's own)")
    user_env: dict[str, str] = Field(default_factory=dict, description="the user's own variables for both runs")
    cwd: str | None = Field(default=None, description="where both runs start, relative to the repository")


class RunSummary(BaseModel):
    role: str
    status: str
    exit_code: int | None
    duration_s: float
    probe_dir: str | None = None
    profile_dir: str | None = None
    stderr_tail: str = ""
    trace_kind: str | None = None


class CheckResult(BaseModel):
    status: Literal["pass", "warn", "fail", "run_failed"]
    summary: str
    out_dir: str
    reference: RunSummary
    target: RunSummary
    parity: ParityReport | None = None
    profile: ProfileReport | None = None
    report_md: str | None = None
    report_json: str | None = None
    chart_png: str | None = None
    notes: list[str] = Field(default_factory=list)
