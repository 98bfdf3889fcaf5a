"""The offline fix policy: rules keyed on trace signatures and parity/profile findings.

Each rule turns a diagnosis into a concrete edit (a proposal with the new file text and its
diff) or into a verdict (a named status with a precise summary, e.g. tpx OOM needs a human).
"""

from agent.policy.base import Diagnosis, FixContext, PolicyRule, Proposal, Verdict
from agent.policy.engine import propose
from agent.policy.registry import policy_rules

__all__ = ["Diagnosis", "FixContext", "PolicyRule", "Proposal", "Verdict", "policy_rules", "propose"]
