"""The cost cap in money (``--llm-max-cost USD`` / ``FERRY_LLM_MAX_COST_USD``).

Before each request the client adds what the migration spent (its tokens at the price table's
prices) to the worst case of that request: every UTF-8 byte of the messages and tool schemas as
one prompt token (a token is at least one byte, so this is an upper bound) and the completion
tokens the request allows (``max_completion_tokens``, sent with each request under a cap). When
that sum is over the cap the request is not sent (:class:`CostCapReached`, ``failed_budget``).

A model the price table does not price cannot be held to a cap: it needs ``--llm-max-cost none``
(no cap in money; the call, token and wall budgets still hold), else the migration does not start.
"""

from __future__ import annotations

import json
from typing import Any

from agent.errors import BudgetExhausted
from agent.settings import COST_ENV, COST_FLAG, NO_CAP, MaxCost, parse_max_cost

#: the completion tokens a request under a cap may use (sent as max_completion_tokens)
COMPLETION_TOKENS_UNDER_CAP = 4096

__all__ = ["COMPLETION_TOKENS_UNDER_CAP", "COST_ENV", "COST_FLAG", "NO_CAP", "CostCapReached", "MaxCost",
           "parse_max_cost", "unpriced_problem", "worst_prompt_tokens"]


def unpriced_problem(model: str | None, cap: MaxCost | None, priced: bool) -> str | None:
    """Why a migration with ``model`` cannot start under ``cap`` (None: it can)."""
    if priced or cap == NO_CAP:
        return None
    from agent.llm.prices import DEFAULT_PRICES, PRICES_ENV

    held = "cannot be held to a cost cap" if cap is not None else "has no price, so its cost cannot be capped"
    return (f"the model {model!r} {held}: the price table ({DEFAULT_PRICES.name}, or ${PRICES_ENV}) has no price "
            f"for it. Add its price to a table named by ${PRICES_ENV}, or pass {COST_FLAG} none "
            f"(or {COST_ENV}=none) to run it with no cap in money (the call, token and wall budgets still hold)")


def worst_prompt_tokens(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> int:
    """An upper bound of the prompt tokens: one per UTF-8 byte of the request's messages and tools."""
    text = json.dumps(messages, ensure_ascii=False) + json.dumps(tools or [], ensure_ascii=False)
    return len(text.encode("utf-8"))


class CostCapReached(BudgetExhausted):
    """The next request could cross the cost cap: it was not sent."""

    def __init__(self, spent_usd: float, cap_usd: float, next_worst_usd: float) -> None:
        self.spent_usd = spent_usd
        self.cap_usd = cap_usd
        self.next_worst_usd = next_worst_usd
        super().__init__(f"LLM cost cap reached: ${spent_usd:.4f} spent of the ${cap_usd:.4f} cap "
                         f"({COST_FLAG}); the next request could cost up to ${next_worst_usd:.4f}, so it was not sent")
