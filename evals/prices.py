"""Model prices for the harness's cost estimate: the agent's table (``agent/llm/prices.toml``,
``$FERRY_LLM_PRICES``), or ``ferry eval --prices FILE``."""

from __future__ import annotations

from agent.llm.prices import DEFAULT_PRICES, PRICES_ENV, Price, Prices

__all__ = ["DEFAULT_PRICES", "PRICES_ENV", "Price", "Prices"]
