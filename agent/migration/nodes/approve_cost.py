"""approve_cost: under --approve, the model's cost cap was reached: ask whether to allow another amount.

``llm_fix`` stops before the request that could cross ``--llm-max-cost`` and leaves the question in
``cost_question``; this node pauses the graph (a LangGraph interrupt, answered like an edit's approval:
the terminal prompt, the service's approval endpoint, the chat). ``approve`` with ``amount_usd`` raises
the cap by that amount and the fix starts again; ``reject`` ends the migration ``failed_budget`` with
what was spent.
"""

from __future__ import annotations

import math
from typing import Any

from langgraph.types import interrupt

from agent.migration.nodes.common import SUMMARY, Update, step
from agent.migration.records import CostQuestion
from agent.migration.runs import RunScheduler
from agent.migration.state import MigrationState, cost_question_of

HOW = ("resume with {'action': 'approve', 'amount_usd': <US dollars to allow beyond the cap>} | "
       "{'action': 'reject'}")


def _amount(answer: dict[str, Any], default: float) -> float | None:
    raw = answer.get("amount_usd", default)
    try:
        value = float(raw)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) and value > 0 else None


@step("approve_cost")
def approve_cost(state: MigrationState, runs: RunScheduler) -> Update:
    question = cost_question_of(state) or CostQuestion(spent_usd=0.0, cap_usd=0.0)
    spent, cap = question.spent_usd, question.cap_usd
    suggested = round(max(question.next_worst_usd, cap), 4)
    answer = interrupt({
        "type": "approve_cost", "kind": "cost", "site": "the model's cost cap",
        "reason": question.reason or f"the cost cap of ${cap:.4f} is reached",
        "spent_usd": spent, "cap_usd": cap, "suggested_usd": suggested, "how": HOW,
    })
    if isinstance(answer, str):
        answer = {"action": answer}
    decision = dict(answer or {})
    action = decision.get("action", "")
    spent_text = f"${spent:.4f} spent on the model of the ${cap:.4f} cap"
    if action == "approve":
        amount = _amount(decision, suggested)
        if amount is not None:
            return {"cost_question": None, "llm_cost_allowance_usd": amount,
                    SUMMARY: f"allowed ${amount:.4f} more beyond the cost cap ({spent_text})"}
        msg = f"an 'approve' of more cost needs amount_usd, a number of US dollars above 0; got {decision!r}"
        return {"cost_question": None, "status": "failed_budget",
                "summary": f"LLM cost cap reached: {spent_text}; {msg}", SUMMARY: msg}
    why = "refused more by the reviewer" if action == "reject" else f"unknown answer {decision!r}"
    msg = f"LLM cost cap reached: {spent_text}; {why}"
    return {"cost_question": None, "status": "failed_budget", "summary": msg, SUMMARY: msg}
