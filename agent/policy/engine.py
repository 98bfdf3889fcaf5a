"""Run the rules in order; the first one that produces an edit or a verdict wins."""

from __future__ import annotations

import logging
from collections.abc import Callable

from agent.policy import (
    rules_cuda,
    rules_device,
    rules_distributed,
    rules_dtype,
    rules_ops,
    rules_parity,
    rules_tolerance,
    rules_verdicts,
)
from agent.policy.base import Diagnosis, FixContext, Proposal, Verdict
from agent.policy.skipped import skipped_sites

logger = logging.getLogger(__name__)

Rule = Callable[[Diagnosis, FixContext], "Proposal | Verdict | None"]

#: a rule keyed on every kind of its phase (it decides by the diagnosis' phase and evidence)
ANY_KIND = "*"

# (rule id, signature kinds it is keyed on, function). Order matters only within a kind.
RULES: tuple[tuple[str, tuple[str, ...], Rule], ...] = (
    ("tpx_backend_unavailable", ("other", "import_error"), rules_verdicts.backend_unavailable),
    ("no_collective_backend", ("other",), rules_verdicts.collectives_unsupported),
    (rules_dtype.RULE, rules_dtype.KINDS, rules_dtype.apply),
    (rules_distributed.RULE, rules_distributed.KINDS, rules_distributed.apply),
    (rules_cuda.RULE, rules_cuda.KINDS, rules_cuda.apply),
    (rules_device.RULE, rules_device.KINDS, rules_device.apply),
    (rules_ops.RULE, rules_ops.KINDS, rules_ops.apply),
    (rules_parity.RULE, rules_parity.KINDS, rules_parity.apply),
    (rules_tolerance.RULE, rules_tolerance.KINDS, rules_tolerance.apply),
    ("tpx_oom_report", ("tpx_oom",), rules_verdicts.oom),
    ("cuda_only_package", ("missing_cuda_package",), rules_verdicts.missing_package),
    ("environment_error", ("import_error", "syntax_error"), rules_verdicts.environment),
    ("teardown_hang_report", ("teardown_hang",), rules_verdicts.teardown_hang),
    # any failing test, last: the parity the drift budget passed was measured exact with 'highest' matmuls
    (rules_parity.RULE, (ANY_KIND,), rules_parity.apply_after_drift),
)


#: what each policy rule does, for the people who name them (``--skip-rule``, the service's chat)
DESCRIPTIONS: dict[str, str] = {
    "tpx_backend_unavailable": "tpx could not build/load: failed_sandbox (the environment, not the code); no edit",
    "no_collective_backend": "no collective backend registered for the device: needs_human; no edit",
    rules_dtype.RULE: "float64 on tpx -> float32 at the failing site (torch.float64/.double() -> float32/.float())",
    rules_distributed.RULE: "init_process_group without a backend for the device -> a per-device backend "
                            "(cpu:gloo plus the device's own)",
    rules_cuda.RULE: "a CUDA call left at the failing line -> the catalogue codemod at that line, the scanner's "
                     "rewrite of a review finding there, or its device-generic equivalent (torch.cuda.Event -> "
                     "torch.Event)",
    rules_device.RULE: "mixed devices -> device= added to the tensor factory created without one",
    rules_ops.RULE: "an op tpx does not support (strict mode) -> the documented CPU fallback made explicit",
    rules_parity.RULE: "parity failure from bf16 matmuls, or failing tests after a drift that 'highest' was "
                       "measured to remove -> torch.set_float32_matmul_precision('highest') on tpx",
    rules_tolerance.RULE: "a test's float32 assert_close fails by what bf16 matmuls round -> full fp32 matmuls "
                          "on tpx in that test module",
    "tpx_oom_report": "tpx out of memory: needs_human with the figures; no edit",
    "cuda_only_package": "a CUDA-only package is imported: needs_human; no edit",
    "environment_error": "an import or syntax error: needs_human; no edit",
    "teardown_hang_report": "the run's work was done but a process did not exit: needs_human with its stack; "
                            "no edit",
}


def propose(diag: Diagnosis, ctx: FixContext) -> Proposal | Verdict | None:
    skipped = set(ctx.skip_rules)
    blocked: list[str] = []
    for rule_id, kinds, rule in RULES:
        if diag.kind not in kinds and ANY_KIND not in kinds:
            continue
        if rule_id in skipped:  # the user asked to leave this rule out
            logger.info("policy: %s skipped by request", rule_id)
            continue
        result = rule(diag, ctx)
        if isinstance(result, Proposal) and (sites := skipped_sites(result, ctx)):
            logger.info("policy: %s would make the change of a skipped rule (%s)", rule_id, "; ".join(sites))
            blocked += sites
            continue
        if result is not None:
            logger.info("policy: %s -> %s", rule_id, type(result).__name__)
            return result
    if blocked:
        return skipped_verdict(diag, blocked)
    logger.info("policy: no rule for %s at %s", diag.kind, diag.where())
    return None


def skipped_verdict(diag: Diagnosis, blocked: list[str]) -> Verdict:
    """The migration stops: the only fix is the change of a rule the user asked to skip."""
    rules = sorted({b.split(" ", 1)[0] for b in blocked})
    return Verdict(rule="skipped_by_request", status="needs_human", summary=(
        f"{diag.phase} failed: {diag.kind} at {diag.where()}: {diag.exc_type} {diag.first_line}".rstrip()
        + f". The fix is the change of {', '.join(rules)} ({'; '.join(blocked)}), which you asked to skip: "
        "it was left as it is. Stop skipping it, or change that code by hand."))
