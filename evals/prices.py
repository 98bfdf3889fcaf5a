"""Model prices for the harness's cost estimate (``evals/prices.toml``, or ``--prices FILE``)."""

from __future__ import annotations

import tomllib
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

DEFAULT_PRICES = Path(__file__).resolve().parent / "prices.toml"


class Price(BaseModel):
    input_per_mtok: float = Field(ge=0)
    output_per_mtok: float = Field(ge=0)


class Prices(BaseModel):
    models: dict[str, Price] = Field(default_factory=dict)

    @classmethod
    def load(cls, path: Path | None = None) -> Prices:
        path = path or DEFAULT_PRICES
        try:
            return cls.model_validate(tomllib.loads(path.read_text(encoding="utf-8")))
        except (OSError, tomllib.TOMLDecodeError, ValidationError) as exc:
            raise ValueError(f"cannot read model prices from {path}: {exc}; see evals/prices.toml for the "
                             "format") from exc

    def cost(self, model: str | None, prompt_tokens: int, completion_tokens: int) -> float | None:
        """US dollars for the tokens, or None when the model has no price here."""
        price = self.models.get(model or "")
        if price is None:
            return None
        return round((prompt_tokens * price.input_per_mtok + completion_tokens * price.output_per_mtok) / 1e6, 6)
