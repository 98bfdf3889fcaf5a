"""parity: compare the reference run's probe dump with the target run's; a failure goes to the policy,
then (under --llm, when no rule applies) to the model, else the migration ends ``partial``.

Under a CUDA autocast the reference and the target both compute in reduced precision: when parity
fails, the fp32 golden run (``agent.migration.nodes.golden``) decides by docs/numerics.md's error ratio whether the
target is as close to the fp32 result as the reference is; the summary names the ratio.

A pass by the drift budget of the later training steps makes no side run here unless ``--explain-drift``: where
the drift comes from cannot change that pass; ``diagnose`` measures it (:func:`measure_drift`) when the tests then
fail, where the policy's FIX008-after-drift rule reads the measurement.

A report with nothing compared (the program ran no nn.Module, printed no metric, saved no tensor,
left none at top level and recorded nothing) is neither a pass nor a failure: the migration goes on
to the tests and the profile, and the report node says parity could not be shown (``partial``), never that it failed.
"""

from __future__ import annotations

from pathlib import Path

from agent.migration import adapters
from agent.migration.nodes import causes, evidence
from agent.migration.nodes.common import (
    SUMMARY,
    Update,
    check_iteration_budget,
    dtype_changes_of,
    ensure_workspace,
    fix_context,
    step,
)
from agent.migration.nodes.golden import cancel_golden, golden_for, wants_golden
from agent.migration.runs import RunScheduler
from agent.migration.state import MigrationState, dump, golden_of, options_of, reference_of, target_ok_of
from agent.policy import Proposal, Verdict, propose
from agent.policy.base import Diagnosis
from agent.policy.rules_parity import RULE as PRECISION_RULE
from tools.parity.models import ParityReport


@step("parity")
def parity(state: MigrationState, runs: RunScheduler) -> Update:
    spec = evidence.pending(state)  # the first round's evidence run: judged here, never the target run
    ref, tgt = reference_of(state), (spec.run if spec is not None else target_ok_of(state))
    ref_dir = ref.probe_dir if ref is not None else None
    tgt_dir = tgt.probe_dir if tgt is not None else None
    if spec is not None and (ref_dir is None or tgt_dir is None or not ref_dir.is_dir() or not tgt_dir.is_dir()
                             or wants_golden(state)):
        return evidence.decline(state, runs, spec, "the evidence run cannot be judged (no probe dump, or the "
                                                   "program computes under autocast)")
    if ref_dir is None or tgt_dir is None or not ref_dir.is_dir() or not tgt_dir.is_dir():
        msg = (f"no probe dump to compare (reference: {ref_dir or 'none'}, target: {tgt_dir or 'none'}); "
               "parity cannot be proven")
        return {"status": "partial", "summary": msg, SUMMARY: msg}
    runs.wait_prewarm()  # it may be importing torch and the parity tools right now
    changes = dtype_changes_of(state)
    report = adapters.compare(ref_dir, tgt_dir, dtype_changes=changes)
    if spec is not None and not report.failed:
        steps = spec.run.ended_after_steps
        return evidence.decline(state, runs, spec, "the evidence run " + (
            f"passes parity on its {steps} recorded steps" if steps is not None and report.compared
            else "passes parity" if report.compared else "recorded nothing to compare"))
    update: Update = {}
    records: list[dict[str, object]] = []
    golden_dir = None
    drifted = report.passed and report.drift is not None and report.drift.used
    if report.compared and report.passed and not drifted:
        cancel_golden(state, runs)
    elif report.compared and spec is None:
        golden, records = golden_for(state, runs)
        if golden is not None:
            update["golden"] = dump(golden)
            if golden.ok and golden.probe_dir is not None and golden.probe_dir.is_dir():
                golden_dir = golden.probe_dir
                report = adapters.compare(ref_dir, tgt_dir, dtype_changes=changes, golden_dir=golden_dir)
            else:
                report.notes.append(f"the fp32 golden run (autocast off) failed ({golden.failure_line()}): no "
                                    "error-ratio check")
    if report.failed:  # test the candidate causes in side runs instead of guessing one
        from agent.migration.nodes.target import drop_beside, start_beside  # target -> cpu_check -> parity

        def next_round(nxt: MigrationState, ws: Path) -> list[str]:
            # the precision trial runs the next round's code (FIX008 written in): this round's tests and CPU check,
            # which the graph then never collects, give their cores to that round's (where no later trial explains
            # the divergence without a code change, the tests node makes them again)
            drop_beside(state, runs)
            return start_beside(nxt, runs, ws)

        if spec is not None:  # this thread waits for the FIX008 run: its round's tests can take the core
            evidence.start_fix_round(state, spec, lambda nxt, ws: start_beside(nxt, runs, ws, foreground=False))
        joined = evidence.joined_fix(state, runs)  # the FIX008 run made beside the evidence run, if any
        found = causes.measure(state, report, ref_dir, golden_dir, changes,
                               beside=next_round, joined=joined,
                               precision_only=spec is not None)
        if spec is not None and (found.prepared is None or found.prepared.files_digest != spec.fix_digest):
            return evidence.decline(state, runs, spec, "the FIX008 run does not remove the divergence the "
                                                       "evidence run shows", fix=joined)
        records += found.records
        report.trials = found.trials
        report.explained_by = causes.explains(found.trials)
        if found.prepared is not None:
            update["prepared_target"] = dump(found.prepared)
    elif drifted and options_of(state).explain_drift:  # passed by the drift budget: measure the drift it admitted
        report, drift_runs = measure_drift(state, report, golden_dir)
        records += drift_runs
    elif drifted and report.drift is not None and report.drift.used:
        report.drift_measured = False  # side runs that cannot change this passing verdict: made if the tests fail
    if records:
        update["runs"] = records
    update["parity"] = dump(report)
    tiers = "".join(f"; {c} by the migration: compared at the {c.split(' -> ')[1]} tier"
                    for c in report.dtype_changes_compared)
    if report.golden is not None:
        tiers += "; " + report.golden.describe()
    if not report.compared:
        update[SUMMARY] = ("nothing to compare (no module ran, no metric printed, no tensor saved or left at "
                           "top level): parity cannot be shown")
        return update
    if report.passed and report.explanation is not None:
        update[SUMMARY] = f"parity passes as measured: {report.explanation.describe()}"
        return update
    if report.passed and report.drift is not None and report.drift.used:
        measured = f"; measured: {report.measured()}" if report.trials else ""
        if report.drift_measured is False:
            measured = "; where the drift comes from is measured only if the tests fail (or with --explain-drift)"
        update[SUMMARY] = f"parity passes; {report.drift.describe()}{measured}" + tiers
        return update
    if report.passed:
        update[SUMMARY] = "parity passes" + tiers
        return update
    where = report.divergence_text()
    ws = ensure_workspace(state)
    ctx = fix_context(state, ws)
    diag = Diagnosis(phase="parity", kind="parity_failed", message=f"parity failed; first divergence: {where}",
                     parity=report)
    result = propose(diag, ctx)
    if spec is not None and not (isinstance(result, Proposal) and PRECISION_RULE in result.rule):
        return evidence.decline(state, runs, spec, "the policy proposes no FIX008 on the evidence run",
                                fix=evidence.joined_fix(state, runs))
    update["diagnosis"] = diag.model_dump(mode="json", exclude={"parity"})  # the state holds the report
    if isinstance(result, Proposal):
        update["proposal"] = dump(result)
        update[SUMMARY] = f"parity fails ({where}) -> {result.rule}"
        if spec is not None:
            update.update(evidence.settle(spec))
            update[SUMMARY] = (f"parity fails on the evidence run's {spec.run.ended_after_steps or 'all'} recorded "
                               f"steps ({where}) -> {result.rule}")
        return update
    if isinstance(result, Verdict):
        update.update({"status": result.status, "summary": result.summary, SUMMARY: result.summary})
        return update
    update["proposal"] = None
    tried = ", ".join(ctx.tried) or "none"
    if options_of(state).llm:
        check_iteration_budget(state, f"parity still fails (first divergence {where}; edits tried: {tried})")
        update[SUMMARY] = f"parity fails ({where}); no offline rule, asking the model"
        return update
    msg = no_rule_left(report, where + tiers, tried)
    update.update({"status": "partial", "summary": msg, SUMMARY: "parity fails; no rule left"})
    return update


def measure_drift(state: MigrationState, report: ParityReport,
                  golden_dir: Path | None = None) -> tuple[ParityReport, list[dict[str, object]]]:
    """The side runs of ``causes.explain_drift`` for a parity that passed by the drift budget: the report with
    their trials (``drift_measured``) and their run records. They cannot change that passing verdict, so the
    parity node makes them only under ``--explain-drift``; otherwise ``diagnose`` makes them when the tests then
    fail, where the policy's FIX008-after-drift rule needs their measurement. ``golden_dir``: the fp32 golden
    run's dump (default: the golden run in the state, if it passed)."""
    ref = reference_of(state)
    ref_dir = ref.probe_dir if ref is not None else None
    if golden_dir is None:
        golden = golden_of(state)
        if golden is not None and golden.ok and golden.probe_dir is not None and golden.probe_dir.is_dir():
            golden_dir = golden.probe_dir
    if ref_dir is None or not ref_dir.is_dir():
        return report, []
    trials, records = causes.explain_drift(state, report, ref_dir, golden_dir, dtype_changes_of(state))
    return report.model_copy(update={"trials": [*report.trials, *trials], "drift_measured": True}), records


def no_rule_left(report: ParityReport, where: str, tried: str) -> str:
    """The summary of a parity failure no offline rule handles. Side runs that all left a divergence measured
    that no setting of tpx's numerics (matmul precision, autocast, random draws) explains it: that is not
    drift but another computation, and the summary says so instead of calling it drift."""
    head = f"the migrated code runs on tpx but parity fails: first divergence {where}; rules already applied: {tried}."
    if report.trials:
        return (f"{head} No measured setting removes the divergence, so it is not rounding drift: on tpx the "
                "migrated code computes something else than the original; a person (or --llm) has to find what.")
    return f"{head} Numeric drift needs a person (or --llm) to judge."
