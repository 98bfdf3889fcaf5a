"""Run the rules in order; the first one that produces an edit or a verdict wins."""

from __future__ import annotations

import logging

from agent.policy.base import ANY_KIND, Diagnosis, FixContext, Proposal, Verdict
from agent.policy.registry import policy_rules
from agent.policy.skipped import skipped_sites

logger = logging.getLogger(__name__)


def propose(diag: Diagnosis, ctx: FixContext) -> Proposal | Verdict | None:
    skipped = set(ctx.skip_rules)
    blocked: list[str] = []
    for policy_rule in policy_rules():
        rule_id, kinds, rule = policy_rule.ID, policy_rule.KINDS, policy_rule.apply
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
