"""The offline fix policy: rules keyed on trace signatures and parity/profile findings.

Each rule turns a diagnosis into a concrete edit (a proposal with the new file text and its
diff) or into a verdict (a named status with a precise summary, e.g. tpx OOM needs a human).
"""

from agent.policy.base import Diagnosis, FixContext, Proposal, Verdict
from agent.policy.engine import RULES, propose

__all__ = ["RULES", "Diagnosis", "FixContext", "Proposal", "Verdict", "propose"]
