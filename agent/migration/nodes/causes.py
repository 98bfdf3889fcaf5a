"""Measured causes of a parity failure: side runs of the migrated code on tpx, cheapest first.

When parity fails, the localiser's cause is a guess from the op class of the first divergent module
("likely reduction_order"). Here each candidate explanation is tested instead: the workspace runs
again on tpx with the candidate's TPX_* setting (plus those of the candidates before it),
and its probe dump is compared with the reference's, or with the fp32 golden run's where autocast is
switched off on the target too. The trials stop at the first that removes the divergence.

``CANDIDATES`` is the table, in the order they are tried:

* ``matmul_precision``: tpx runs float32 matmuls with bf16 inputs unless a program asks for 'highest'
  (``TPX_MATMUL_PRECISION=highest``; FIX008 is the edit that keeps it, for tpx only);
* ``autocast``: a program under CUDA's autocast computes in fp16/bf16 on both sides, and the rounding
  of the first optimizer step carries into every later one; with autocast off on tpx
  (``TPX_AUTOCAST=off``) against the fp32 golden run (the original with its autocast off), the two
  compute the same float32 program;
* ``rng``: tpx draws random numbers counter-based, as a chip does (DTensor's sharded init draws the
  halves of one whole tensor), where the CPU reference draws each rank's shard from its own stream;
  ``TPX_RNG=host`` draws in the CPU stream's order.

``autocast`` and ``rng`` change no computation of the program: a side run they make pass shows that
the migrated code computes what the original does (the parity report is then ``explained_by`` them).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from agent.migration import adapters
from agent.migration.budget import has_time_for, run_timeout
from agent.migration.nodes.common import artifacts_dir, ensure_workspace, fix_context
from agent.migration.paths import workspaces_root
from agent.migration.records import PreparedRun, RunRecord
from agent.migration.state import MigrationState, dump, edits_of, files_of, iteration_of, migration_id_of, options_of
from agent.migration.workspace import code_digest, materialise
from agent.policy.rules_parity import RULE as PRECISION_RULE
from agent.policy.rules_parity import program_start_fix
from tools.parity.models import CauseId, CauseTrial, ParityReport, TensorComparison, removing_trial
from tools.runner.models import RunResult

logger = logging.getLogger(__name__)

# side runs that change no computation of the program: passing with them explains the drift
NOT_COMPUTATION: frozenset[CauseId] = frozenset({"autocast", "rng"})


@dataclass(frozen=True)
class Candidate:
    cause: CauseId
    setting: str
    env: tuple[tuple[str, str], ...]

    def carried_by(self, env: dict[str, str]) -> bool:
        """Whether a side run with ``env`` had this candidate's settings."""
        return all(env.get(k) == v for k, v in self.env)


CANDIDATES: tuple[Candidate, ...] = (
    Candidate("matmul_precision", "torch.set_float32_matmul_precision('highest') on tpx (TPX_MATMUL_PRECISION=highest)",
              (("TPX_MATMUL_PRECISION", "highest"),)),
    Candidate("autocast", "autocast off on both sides (TPX_AUTOCAST=off, against the fp32 golden run)",
              (("TPX_AUTOCAST", "off"),)),
    Candidate("rng", "tpx's random draws in the CPU stream's order (TPX_RNG=host)", (("TPX_RNG", "host"),)),
)
PRECISION = CANDIDATES[0]  # the one setting the code may have to take (FIX008)


def precision_in_code(state: MigrationState) -> bool:
    """Whether the migration's edits already set 'highest' on tpx (FIX008): the runs have it."""
    return any(PRECISION_RULE in (edit.rule or "") for edit in edits_of(state))


def applicable(state: MigrationState, report: ParityReport, cand: Candidate, golden_dir: Path | None) -> bool:
    if cand.cause == "matmul_precision":
        return not precision_in_code(state)
    if cand.cause == "autocast":  # only a program under CUDA autocast has a golden run to compare with
        return golden_dir is not None
    first = report.first_divergence
    # random init and dropout differ from the first call on; a divergence born later is not the draws'
    return first is None or first.step in (None, 0) or first.call == 0


def _first_failing(report: ParityReport) -> TensorComparison | None:
    if report.first_divergence is not None:
        return report.first_divergence.output
    return next((t for t in report.rows() if t.verdict == "fail"), None)


def _fails(report: ParityReport) -> int:
    return sum(1 for t in report.rows() if t.verdict == "fail")


@dataclass
class Measured:
    """What :func:`measure` found: the trials, the run records to add, and the run of the next round's code
    the precision trial made (FIX008 written in), if it made one that passed."""

    trials: list[CauseTrial]
    records: list[dict[str, object]]
    prepared: PreparedRun | None = None


BesideFn = Callable[[MigrationState, Path], object]


def precision_fix(state: MigrationState) -> tuple[str, str] | None:
    """(file, new text): FIX008 as the policy would write it for this code (the precision rule's own
    ``program_start_fix``), or None where it would not (no file takes it, it is there already, it was tried)."""
    ws = ensure_workspace(state)
    try:
        return program_start_fix(fix_context(state, ws))
    except Exception:  # the trial then runs with the setting instead (never worse than before)
        logger.exception("parity causes: FIX008 could not be written for the precision trial")
        return None


def measure(state: MigrationState, report: ParityReport, ref_dir: Path, golden_dir: Path | None,
            dtype_changes: dict[str, str], beside: BesideFn | None = None,
            joined: PreparedRun | None = None, precision_only: bool = False) -> Measured:
    """Run the applicable candidates in order, each with the settings of all those before it (causes can
    hide each other: bf16 matmul drift is not seen while the random init differs), until one removes the
    divergence; where the side run that did carried 'highest' matmuls with other settings, one more run
    without them tells whether the code needs them. ``golden_dir``: the fp32 golden run's dump (None: the
    program computes under no autocast, or its golden run failed).

    The matmul-precision trial, first and alone, runs the code with FIX008 written in (the statement the
    policy adds when this trial removes the divergence) rather than the workspace with
    ``TPX_MATMUL_PRECISION=highest``, probed and profiled like a target run: when the policy then applies
    that very edit, the trial's run is the next round's target run (``Measured.prepared``) and the code is
    not run a second time. ``beside(next_state, workspace)`` starts that round's tests and CPU check beside
    the trial. Where the policy would not write FIX008, the trial runs with the setting. ``joined``: that
    run, made already beside the evidence run (``agent.migration.nodes.evidence``): the trial joins it instead
    of running the same code again (only a run of exactly the code with FIX008 written in). ``precision_only``:
    the precision trial alone (the evidence run's: where it does not remove the divergence, the full round
    measures the rest)."""
    before = _first_failing(report)
    env: dict[str, str] = {}
    out = Measured([], [])
    trials, records = out.trials, out.records
    for cand in CANDIDATES[:1] if precision_only else CANDIDATES:
        if not applicable(state, report, cand, golden_dir):
            continue
        if not has_time_for(state, "cause_trial"):
            logger.info("parity causes: no time left for the %s side run", cand.cause)
            break
        env = {**env, **dict(cand.env)}
        fix = precision_fix(state) if cand is PRECISION else None
        if fix is not None and joined is not None and joined.files_digest == code_digest({**files_of(state),
                                                                                          fix[0]: fix[1]}):
            trial, record, out.prepared = _joined_run(state, report, before, fix, joined, ref_dir, dtype_changes,
                                                      beside)
        elif fix is not None:
            trial, record, out.prepared = _in_code_run(state, report, before, fix, ref_dir, dtype_changes, beside)
        else:
            trial, record = _side_run(state, report, before, cand.cause, cand.setting, env, ref_dir, golden_dir,
                                      dtype_changes)
        trials.append(trial)
        records.append(record)
        if not trial.removed:
            continue
        if cand is not PRECISION and PRECISION.carried_by(env) and has_time_for(state, "cause_trial"):
            alone = {k: v for k, v in env.items() if k not in dict(PRECISION.env)}
            trial, record = _side_run(state, report, before, cand.cause, f"{cand.setting}, matmuls as tpx runs them",
                                      alone, ref_dir, golden_dir, dtype_changes)
            trials.append(trial)
            records.append(record)
        break
    return out


def _in_code_run(state: MigrationState, report: ParityReport, before: TensorComparison | None,
                 fix: tuple[str, str], ref_dir: Path, dtype_changes: dict[str, str],
                 beside: BesideFn | None) -> tuple[CauseTrial, dict[str, object], PreparedRun | None]:
    """The precision trial on the code with FIX008 written into ``fix[0]``, in a private copy of its own (the
    migration's workspace keeps this round's code): no TPX_* setting, probed and profiled as a target run."""
    opts = options_of(state)
    rel, text = fix
    files = {**files_of(state), rel: text}
    nxt: MigrationState = {**state, "files": files, "iteration": iteration_of(state) + 1, "workspace": None}
    ws = materialise(Path(opts.source), None, files, workspaces_root(opts.state_dir, migration_id_of(state)))
    if beside is not None:
        beside(nxt, ws)
    setting = f"torch.set_float32_matmul_precision('highest') on tpx (FIX008 written into {rel})"
    run = adapters.run(ws, opts.run_command, device="tpx", redirect_cuda=None, probe=True, profile=True,
                       timeout_s=run_timeout(state), seed=opts.seed,
                       artifacts_dir=artifacts_dir(state, f"cause-{iteration_of(state)}-matmul_precision-in-code"),
                       disk_limit_bytes=opts.disk_limit_bytes)
    trial = _trial(report, before, PRECISION.cause, setting, dict(PRECISION.env), ref_dir, None, run, dtype_changes)
    prepared = (PreparedRun(files_digest=code_digest(files), workspace=str(ws), run=run) if run.ok else None)
    return trial, dump(RunRecord.of("cause_trial", run)), prepared


def _joined_run(state: MigrationState, report: ParityReport, before: TensorComparison | None,
                fix: tuple[str, str], joined: PreparedRun, ref_dir: Path, dtype_changes: dict[str, str],
                beside: BesideFn | None) -> tuple[CauseTrial, dict[str, object], PreparedRun | None]:
    """The precision trial on the FIX008 run made beside the evidence run: measured as :func:`_in_code_run`'s
    own run would be; the next round's tests and CPU check are started where they were not yet."""
    rel = fix[0]
    if beside is not None:
        beside({**state, "files": {**files_of(state), rel: fix[1]}, "iteration": iteration_of(state) + 1,
                "workspace": None}, Path(joined.workspace))
    setting = f"torch.set_float32_matmul_precision('highest') on tpx (FIX008 written into {rel})"
    run = joined.run
    trial = _trial(report, before, PRECISION.cause, setting, dict(PRECISION.env), ref_dir, None, run, dtype_changes)
    return trial, dump(RunRecord.of("cause_trial", run)), (joined if run.ok else None)


def explain_drift(state: MigrationState, report: ParityReport, ref_dir: Path, golden_dir: Path | None,
                  dtype_changes: dict[str, str]) -> tuple[list[CauseTrial], list[dict[str, object]]]:
    """Parity passed only by the drift budget of the later training steps: measure where the drift comes
    from instead of leaving it unexplained. Side runs compared strictly (no budget), cheapest first: full-
    precision matmuls on tpx (where the code does not ask for them yet), then autocast off on both sides
    against the fp32 golden run (a program under CUDA autocast, ``golden_dir``); the first that makes the
    drift disappear is reported with its numbers. Nothing is added to the code for it: the drift is within
    its budget."""
    drift = report.drift
    if drift is None or not drift.used:
        return [], []
    before = next((t for t in report.rows() if t.key == drift.worst_key), None)
    trials: list[CauseTrial] = []
    records: list[dict[str, object]] = []
    env: dict[str, str] = {}
    for cand in CANDIDATES[:2]:  # the random draws differ from step 0 on: not a later step's drift
        if not applicable(state, report, cand, golden_dir):
            continue
        if not has_time_for(state, "cause_trial"):
            logger.info("parity causes: no time left to measure the drift")
            break
        env = {**env, **dict(cand.env)}  # each carries the settings before it, as measure()'s do
        trial, record = _side_run(state, report, before, cand.cause, cand.setting, env, ref_dir,
                                  golden_dir, dtype_changes, strict=True)
        trials.append(trial.model_copy(update={"drift": True}))
        records.append(record)
        if trial.removed:
            break
    return trials, records


def _side_run(state: MigrationState, report: ParityReport, before: TensorComparison | None, cause: CauseId,
              setting: str, env: dict[str, str], ref_dir: Path, golden_dir: Path | None,
              dtype_changes: dict[str, str], strict: bool = False) -> tuple[CauseTrial, dict[str, object]]:
    opts = options_of(state)
    it = iteration_of(state)
    label = "-".join(sorted(k.removeprefix("TPX_").lower() for k in env)) or "none"
    run = adapters.run(ensure_workspace(state), opts.run_command, device="tpx", redirect_cuda=None, probe=True,
                      profile=False, timeout_s=run_timeout(state), seed=opts.seed, env=dict(env),
                      artifacts_dir=artifacts_dir(state, f"cause-{it}-{label}"),
                      disk_limit_bytes=opts.disk_limit_bytes)
    trial = _trial(report, before, cause, setting, env, ref_dir, golden_dir, run, dtype_changes, strict)
    return trial, dump(RunRecord.of("cause_trial", run))


def _trial(report: ParityReport, before: TensorComparison | None, cause: CauseId, setting: str,
           env: dict[str, str], ref_dir: Path, golden_dir: Path | None, run: RunResult,
           dtype_changes: dict[str, str], strict: bool = False) -> CauseTrial:
    """The side run ``run`` measured: its probe dump compared with the reference's (the golden run's where
    ``env`` turns autocast off), at ``before``'s key and in all."""
    against: Literal["reference", "golden"] = "golden" if env.get("TPX_AUTOCAST") == "off" else "reference"
    base_dir = golden_dir if against == "golden" else ref_dir
    trial = CauseTrial(cause=cause, setting=setting, env=dict(env), against=against, run_status=run.status,
                       before_key=before.key if before is not None else None,
                       before_max_abs=before.metrics.max_abs if before is not None and before.metrics else None,
                       fails_before=_fails(report))
    if run.ok and run.probe_dir is not None and base_dir is not None:
        side = adapters.compare(base_dir, run.probe_dir, dtype_changes=dtype_changes, drift_budget=not strict)
        at = next((t for t in side.rows() if before is not None and t.key == before.key), None)
        first = side.first_divergence
        trial = trial.model_copy(update={
            "verdict": side.verdict, "fails_after": _fails(side), "summary": side.summary,
            "after_key": None if side.passed else (first.output.key if first is not None else trial.before_key),
            "after_max_abs": at.metrics.max_abs if at is not None and at.metrics is not None else None,
        })
    logger.info("parity causes: %s", trial.describe())
    return trial


def chain(trials: list[CauseTrial]) -> list[CauseId]:
    """The causes of the last trial that removed the divergence: its own and those it carried (by env)."""
    done = removing_trial(trials)
    return [] if done is None else [c.cause for c in CANDIDATES if c.carried_by(done.env)]


def explains(trials: list[CauseTrial]) -> list[CauseId]:
    """The causes that explain the divergence without a change of the program (``NOT_COMPUTATION``): [] when
    no trial removed it or its settings include one the code must take (matmul precision: FIX008)."""
    causes = chain(trials)
    return causes if causes and set(causes) <= NOT_COMPUTATION else []
