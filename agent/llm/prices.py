"""Token prices per model (``agent/llm/prices.toml``, or the file ``$FERRY_LLM_PRICES`` names) and
the estimated cost of a migration's tokens. A model with no price has no cost (None), never a guess."""

from __future__ import annotations

import logging
import tomllib
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

from agent.settings import settings

logger = logging.getLogger(__name__)

DEFAULT_PRICES = Path(__file__).resolve().parent / "prices.toml"
PRICES_ENV = "FERRY_LLM_PRICES"


class Price(BaseModel):
    input_per_mtok: float = Field(ge=0, allow_inf_nan=False)
    output_per_mtok: float = Field(ge=0, allow_inf_nan=False)


class Prices(BaseModel):
    models: dict[str, Price] = Field(default_factory=dict)

    @classmethod
    def load(cls, path: Path | None = None) -> Prices:
        """``path``, else ``$FERRY_LLM_PRICES``, else the table shipped with Ferry; ValueError when unreadable."""
        given = settings().llm.prices
        path = path or (given.expanduser() if given is not None else DEFAULT_PRICES)
        try:
            return cls.model_validate(tomllib.loads(path.read_text(encoding="utf-8")))
        except (OSError, tomllib.TOMLDecodeError, ValidationError) as exc:
            raise ValueError(f"cannot read model prices from {path}: {exc}; see {DEFAULT_PRICES} for the "
                             "format") from exc

    def cost(self, model: str | None, prompt_tokens: int, completion_tokens: int) -> float | None:
        """US dollars for the tokens, or None when the model has no price here."""
        price = self.models.get(model or "")
        if price is None:
            return None
        return round((prompt_tokens * price.input_per_mtok + completion_tokens * price.output_per_mtok) / 1e6, 6)


def estimated_cost(model: str | None, prompt_tokens: int, completion_tokens: int) -> float | None:
    """The cost from the configured price table; None when the model has no price or the table is unreadable
    (logged: a report is never lost to a bad price file)."""
    if not (prompt_tokens or completion_tokens):
        return 0.0
    try:
        prices = Prices.load()
    except ValueError as exc:
        logger.warning("%s", exc)
        return None
    return prices.cost(model, prompt_tokens, completion_tokens)
