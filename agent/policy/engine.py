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

logger = logging.getLogger(__name__)

Rule = Callable[[Diagnosis, FixContext], "Proposal | Verdict | None"]

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
)


def propose(diag: Diagnosis, ctx: FixContext) -> Proposal | Verdict | None:
    for rule_id, kinds, rule in RULES:
        if diag.kind not in kinds:
            continue
        result = rule(diag, ctx)
        if result is not None:
            logger.info("policy: %s -> %s", rule_id, type(result).__name__)
            return result
    logger.info("policy: no rule for %s at %s", diag.kind, diag.where())
    return None
