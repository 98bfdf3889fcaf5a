"""compare_dumps: a reference probe dump against a target probe dump, per docs/numerics.md."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Required, TypedDict

import torch

from tools.parity.drift import judge_later_steps, step_count_check, uneven_tolerated
from tools.parity.gradients import GRADIENT_KINDS, gradient_findings
from tools.parity.localise import first_divergence
from tools.parity.metrics import judge
from tools.parity.models import (
    CompareOptions,
    Divergence,
    GoldenSummary,
    ModuleComparison,
    ParityReport,
    TensorComparison,
)
from tools.parity.ranks import rank_agreement
from tools.parity.tolerances import SCALAR_DTYPE
from tools.parity.verdicts import VERDICT_RANK, Judgement, Verdict
from tools.probe.dump import ProbeDump
from tools.probe.results import RESULT_KINDS

# what the program saved (``saved``) and its final top-level tensors (``final``) too: programs without a module
# a program's float64 result (what it saves, its final tensors) is float32 on a device without float64, whoever
# made the change (Ferry's edit or a reviewer's): compared at the float32 tier, as the migration's own changes
RESULT_DTYPE_CHANGES = {"float64": "float32"}
TENSOR_KINDS = ("module_input", "module_output", "record", *RESULT_KINDS, *GRADIENT_KINDS)


class _Described(TypedDict, total=False):
    """What a TensorComparison says of the tensor itself, whatever its verdict."""

    key: Required[str]
    kind: Required[str]
    module: str | None
    call: int | None
    leaf: str | None
    step: int | None
    ref_shape: list[int] | None
    ref_dtype: str | None
    target_shape: list[int] | None
    target_dtype: str | None
    target_device: str | None


def worst(verdicts: list[Verdict]) -> Verdict | Literal["none"]:
    if not verdicts:
        return "none"
    return max(verdicts, key=lambda v: VERDICT_RANK.get(v, 0))


def _resolve(dump: ProbeDump, key: str) -> str:
    event = dump.tensor_events.get(key)
    seen = 0
    while event is not None and "same_as" in event and seen < 64:
        key = event["same_as"]
        event = dump.tensor_events.get(key)
        seen += 1
    return key


def _changed_by_migration(ref_dtype: str | None, target_dtype: str | None, changes: dict[str, str]) -> bool:
    """Whether the migration itself turned ``ref_dtype`` into ``target_dtype`` (float64 -> float32)."""
    return ref_dtype is not None and target_dtype is not None and changes.get(ref_dtype) == target_dtype


def _compare_tensor(ref: ProbeDump, tgt: ProbeDump, golden: ProbeDump | None, key: str,
                    cache: dict[tuple[str, str], TensorComparison],
                    changes: dict[str, str] | None = None) -> TensorComparison:
    r_ev = ref.tensor_events[key]
    base: _Described = {
        "key": key, "kind": r_ev.get("kind", "?"), "module": r_ev.get("module"), "call": r_ev.get("call"),
        "leaf": r_ev.get("leaf"), "step": r_ev.get("step"), "ref_shape": r_ev.get("shape"),
        "ref_dtype": r_ev.get("dtype"),
    }
    t_ev = tgt.tensor_events.get(key)
    if t_ev is None and tgt.meta.get("stopped") and r_ev["seq"] >= tgt.meta.get("stopped_at_seq", 0):
        return TensorComparison(**base, verdict="skipped", tier="not_recorded",
                                reason=f"not recorded in the target run, whose probe stopped: {tgt.meta['stopped']}")
    if t_ev is None:
        return TensorComparison(**base, verdict="fail", tier="missing",
                                reason="not recorded in the target run: execution took a different path")
    base.update({"target_shape": t_ev.get("shape"), "target_dtype": t_ev.get("dtype"),
                 "target_device": t_ev.get("device")})
    pair = (_resolve(ref, key), _resolve(tgt, key))
    if pair in cache:
        c = cache[pair]
        return TensorComparison(**{**c.model_dump(), **base})
    if base["ref_shape"] != base["target_shape"]:
        result = TensorComparison(**base, verdict="fail", tier="shape",
                                  reason=f"shape mismatch: reference {base['ref_shape']} "
                                         f"vs target {base['target_shape']}")
    elif base["ref_dtype"] != base["target_dtype"] and not _changed_by_migration(
            base["ref_dtype"], base["target_dtype"], changes or {}):
        result = TensorComparison(**base, verdict="fail", tier="dtype",
                                  reason=f"dtype mismatch: reference {base['ref_dtype']} "
                                         f"vs target {base['target_dtype']}")
    else:
        a, b = ref.tensor(key), tgt.tensor(key)
        if a is None or b is None:
            why = r_ev.get("skipped") if a is None else t_ev.get("skipped")
            result = TensorComparison(**base, verdict="skipped", tier="not_recorded",
                                      reason=f"no data to compare ({why or 'not written'})")
        else:
            g = None
            if golden is not None and key in golden.tensor_events:
                g = golden.tensor(key)
            reason_prefix = ""
            if a.dtype != b.dtype:  # a dtype change the migration made: judged at the target dtype's tier
                reason_prefix = (f"compared at the {base['target_dtype']} tier (the migration changed "
                                 f"{base['ref_dtype']} -> {base['target_dtype']}): ")
                a = a.to(b.dtype)
                g = g.to(b.dtype) if g is not None and g.dtype == torch.float64 else g
            j = judge(a, b, golden=g)
            result = TensorComparison(**base, verdict=j.verdict, tier=j.tier, reason=reason_prefix + j.reason,
                                      metrics=j.metrics, tolerances=j.tolerances)
    cache[pair] = result
    return result


def _uneven_stream(j: Judgement, n_ref: int, n_target: int) -> Judgement:
    """The judgement of the common prefix of two streams of different lengths, saying so; never better
    than ``warn``, and ``fail`` where the lengths differ by more than :func:`uneven_tolerated` allows."""
    n = min(n_ref, n_target)
    what = (f"stream length differs: reference printed {n_ref} values, target {n_target}; the first {n} "
            f"compared ({j.reason})")
    if not uneven_tolerated(n_ref, n_target):
        return j.model_copy(update={"verdict": "fail", "reason": what + "; too many values differ in number for "
                                                                       "one curve (more than a tenth)"})
    what += f"; the {abs(n_ref - n_target)} unmatched value(s) not judged"
    if j.verdict == "pass":  # the prefix matched: what is left to say is the length (the drift budget has no say)
        return j.model_copy(update={"verdict": "warn", "tier": "shape", "reason": what})
    return j.model_copy(update={"reason": what})


def _compare_scalars(ref: ProbeDump, tgt: ProbeDump, golden: ProbeDump | None) -> list[TensorComparison]:
    out: list[TensorComparison] = []
    for name, values in ref.scalars.items():
        key = f"scalar:{name}"
        base: _Described = {"key": key, "kind": "scalar", "module": key, "ref_shape": [len(values)],
                             "ref_dtype": SCALAR_DTYPE}
        if name not in tgt.scalars:
            out.append(TensorComparison(**base, verdict="fail", tier="missing",
                                        reason=f"the target run printed no '{name}' values"))
            continue
        t_values = tgt.scalars[name]
        base.update({"target_shape": [len(t_values)], "target_dtype": SCALAR_DTYPE})
        n = min(len(values), len(t_values))
        a = torch.tensor(values[:n], dtype=torch.float64)
        b = torch.tensor(t_values[:n], dtype=torch.float64)
        g_values = golden.scalars.get(name) if golden is not None else None
        g = torch.tensor(g_values[:n], dtype=torch.float64) if g_values and len(g_values) >= n else None
        j = judge(a, b, golden=g, dtype=SCALAR_DTYPE, curve=True)
        if len(values) != len(t_values):
            j = _uneven_stream(j, len(values), len(t_values))
        out.append(TensorComparison(**base, verdict=j.verdict, tier=j.tier, reason=j.reason,
                                    metrics=j.metrics, tolerances=j.tolerances))
    return out


def _ended_after(dump: ProbeDump) -> int | None:
    """The recorded steps after which the probe ended the run of ``dump`` (FERRY_PROBE_END), or None."""
    ended = dump.meta.get("ended_after_steps")
    return ended if isinstance(ended, int) and not isinstance(ended, bool) else None


def _after_end(event: Any, ended: int | None) -> bool:
    """Whether a reference module event lies in a step the ended target run never reached."""
    if ended is None or event.get("kind") not in ("module_input", "module_output", "module_end"):
        return False
    step = event.get("step")
    return isinstance(step, int) and step >= ended


def _module_table(ref: ProbeDump, tensors: list[TensorComparison], ended: int | None = None) -> list[ModuleComparison]:
    by_call: dict[tuple[str, int], dict[str, list[TensorComparison]]] = {}
    for t in tensors:
        if t.kind in ("module_input", "module_output") and t.module is not None and t.call is not None:
            slot = by_call.setdefault((t.module, t.call), {"in": [], "out": []})
            slot["in" if t.kind == "module_input" else "out"].append(t)
    rows: list[ModuleComparison] = []
    for i, marker in enumerate(m for m in ref.module_calls() if not _after_end(m, ended)):
        slot = by_call.get((marker["module"], marker["call"]), {"in": [], "out": []})
        outs = [t.metrics for t in slot["out"] if t.metrics is not None]
        rows.append(ModuleComparison(
            order=i, key=marker["key"], module=marker["module"], call=marker["call"], step=marker.get("step"),
            module_class=marker.get("class"),
            input_verdict=worst([t.verdict for t in slot["in"]]),
            output_verdict=worst([t.verdict for t in slot["out"]]),
            max_abs=max((m.max_abs for m in outs), default=None),
            max_rel=max((m.max_rel for m in outs), default=None),
            cosine=min((m.cosine for m in outs), default=None),
        ))
    return rows


def compare_dumps(ref_dir: Path | str, target_dir: Path | str, options: CompareOptions | None = None) -> ParityReport:
    """Compare two probe dumps; see docs/parity.md for the verdict chain and localisation."""
    options = options or CompareOptions()
    ref, tgt = ProbeDump(ref_dir), ProbeDump(target_dir)
    golden = ProbeDump(options.golden_dir) if options.golden_dir else None
    kinds = [k for k in TENSOR_KINDS if (k != "module_input" or options.include_inputs)
             and (k != "record" or options.include_records)]
    # a program with module calls is judged by them: its saved checkpoints and final tensors are the end of
    # a training whose later steps may drift (the drift budget judges recorded steps), and a sampled token
    # there differs wholesale; they are the evidence of a program that runs no nn.Module
    results_left = bool(ref.module_calls()) and any(ev.get("kind") in RESULT_KINDS
                                                    for ev in ref.tensor_events.values())
    if results_left:
        kinds = [k for k in kinds if k not in RESULT_KINDS]
    # an evidence run the probe ended after its recorded steps (FERRY_PROBE_END) has those steps' module calls
    # and gradients; what the program would have printed, saved or left at its end it never reached
    ended = _ended_after(tgt)
    if ended is not None:
        kinds = [k for k in kinds if k in ("module_input", "module_output", *GRADIENT_KINDS)]
    cache: dict[tuple[str, str], TensorComparison] = {}
    tensors = [
        _compare_tensor(ref, tgt, golden, key, cache,
                        {**RESULT_DTYPE_CHANGES, **options.dtype_changes} if ev.get("kind") in RESULT_KINDS
                        else options.dtype_changes)
        for key, ev in sorted(ref.tensor_events.items(), key=lambda kv: kv[1]["seq"])
        if ev.get("kind") in kinds and not _after_end(ev, ended)
    ]
    scalars = _compare_scalars(ref, tgt, golden) if options.include_scalars and ended is None else []
    drift = None
    if options.drift_budget:
        tensors, scalars, drift = judge_later_steps(ref, tgt, tensors, scalars)
    step_count = step_count_check(ref, tgt) if ended is None else None
    if step_count is not None:
        tensors.append(step_count)
    modules = _module_table(ref, tensors, ended)
    missing = [t.key for t in tensors if t.tier == "missing"]
    extra = [k for k, ev in tgt.tensor_events.items() if k not in ref.tensor_events and ev.get("kind") in kinds]
    notes: list[str] = []
    if ended is not None:
        notes.append(f"the target run was ended by the probe after its {ended} recorded step(s) (an evidence run): "
                     f"only the module calls and gradients of steps 0..{ended - 1} were compared; the printed "
                     "values, the saved and final tensors and the step count of a run that did not reach its end "
                     "were not")
    if results_left:
        notes.append("the tensors the program saved and its final top-level tensors were recorded but not compared: "
                     "its module calls are the evidence (docs/parity.md)")
    for name, dump in (("reference", ref), ("target", tgt)):
        if dump.meta.get("dropped_events"):
            notes.append(f"{name} dump hit its byte budget: {dump.meta['dropped_events']} tensor(s) not recorded "
                         "(raise FERRY_PROBE_MAX_BYTES or lower FERRY_PROBE_STEPS)")
        if dump.meta.get("stopped"):
            notes.append(f"{name} probe stopped recording early ({dump.meta['stopped']}); compared what was "
                         "recorded before")
        if not dump.meta.get("closed"):
            notes.append(f"{name} dump was not closed cleanly (the run crashed or was killed); "
                         "compared what was flushed")
    if extra:
        notes.append(f"{len(extra)} tensor(s) recorded only in the target run")
    changed = _dtype_changes_used(tensors, options.dtype_changes)
    for change, count in changed.items():
        notes.append(f"{count} tensor(s) compared at the {change.split(' -> ')[1]} tier: the migration changed "
                     f"{change} (the reference computes in the original dtype)")
    all_items = tensors + scalars
    counts = {v: sum(1 for t in all_items if t.verdict == v) for v in ("pass", "warn", "fail", "skipped")}
    counts["compared"] = len(all_items)
    counts["modules"] = len(modules)
    worst_seen = worst([t.verdict for t in all_items])
    verdict: Verdict = "skipped" if worst_seen == "none" else worst_seen
    divergence = first_divergence(modules, tensors, scalars, ref, tgt, drift)
    grads = gradient_findings(tensors, modules, ref, ref_dir, target_dir,
                              lambda r, t, key: _compare_tensor(r, t, None, key, {}, options.dtype_changes))
    divergence = grads.explain(divergence, ref.module_classes)
    verdict = grads.verdict(verdict)
    first_warning = next((t for t in all_items if t.verdict == "warn"), None)
    summary = grads.summarise(_summary(verdict, counts, divergence, first_warning))
    notes += grads.notes()
    agreement = rank_agreement(ref_dir, target_dir)  # rank 0 was compared; the other ranks must agree with it
    notes += agreement.notes()
    if agreement.disagreeing:
        verdict = "fail"
        summary = f"the target's ranks disagree on {', '.join(agreement.disagreeing)}; " + summary
    if changed:
        summary += "; " + ", ".join(f"{c} by the migration: compared at the {c.split(' -> ')[1]} tier"
                                    for c in changed)
    golden_summary = _golden_summary(str(options.golden_dir), all_items) if golden is not None else None
    if golden_summary is not None:
        summary += "; " + golden_summary.describe()
        notes.append(golden_summary.describe())
    if drift is not None and (drift.judged or drift.curves_judged or drift.note):
        notes.append(drift.describe())
        if drift.used:
            summary += "; " + drift.describe()
    if not all_items:
        notes.append("nothing to compare: neither module calls, records, saved or final tensors nor printed "
                     "scalars were recorded")
    return ParityReport(
        verdict=verdict, summary=summary, ref_dir=str(ref_dir), target_dir=str(target_dir),
        golden_dir=str(options.golden_dir) if options.golden_dir else None, golden=golden_summary, counts=counts,
        first_divergence=divergence, first_warning=first_warning, first_divergent_gradient=grads.gradient,
        first_divergent_update=grads.update, gradient_ranks=grads.ranks, modules=modules, tensors=tensors,
        scalars=scalars, missing_in_target=missing, extra_in_target=extra, notes=notes,
        target_meta=_meta_subset(tgt.meta), dtype_changes_compared=changed, drift=drift,
    )


def _golden_summary(golden_dir: str, items: list[TensorComparison]) -> GoldenSummary:
    with_ratio = [t for t in items if t.metrics is not None and t.metrics.error_ratio is not None]
    # the tensors the earlier tiers did not pass: the ratio gave their verdict, or failed them too
    decided = [t for t in with_ratio if t.tier == "error_ratio" or (t.tier == "tiered" and t.verdict != "pass")]
    ratios = [t.metrics.error_ratio for t in decided if t.metrics is not None and t.metrics.error_ratio is not None]
    same = sum(1 for t in items if t.metrics is not None and t.metrics.golden_equals_reference)
    return GoldenSummary(golden_dir=golden_dir, with_ratio=len(with_ratio), decided=len(decided),
                         decided_fail=sum(1 for t in decided if t.verdict == "fail"),
                         max_ratio=max(ratios) if ratios else None, same_as_reference=same)


def _dtype_changes_used(tensors: list[TensorComparison], changes: dict[str, str]) -> dict[str, int]:
    """How many compared tensors each of the migration's dtype changes covered ("float64 -> float32": n)."""
    used: dict[str, int] = {}
    for t in tensors:
        if t.ref_dtype != t.target_dtype and _changed_by_migration(t.ref_dtype, t.target_dtype, changes):
            change = f"{t.ref_dtype} -> {t.target_dtype}"
            used[change] = used.get(change, 0) + 1
    return used


def _meta_subset(meta: dict[str, Any]) -> dict[str, Any]:
    keep = ("matmul_precision", "final_matmul_precision", "env", "tpx", "steps_seen", "optimizer_steps",
            "optimizer_steps_total", "closed")
    return {k: meta[k] for k in keep if k in meta}


def _summary(verdict: str, counts: dict[str, int], divergence: Divergence | None,
             first_warning: TensorComparison | None) -> str:
    head = (f"parity {verdict.upper()}: {counts['pass']} pass, {counts['warn']} warn, {counts['fail']} fail, "
            f"{counts['skipped']} skipped of {counts['compared']} compared")
    if divergence is not None:
        return f"{head}; first divergence at {divergence.key} ({divergence.likely_cause}): {divergence.explanation}"
    if first_warning is not None:
        return f"{head}; first warning at {first_warning.key}: {first_warning.reason}"
    return head
