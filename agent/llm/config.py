"""Where the model is and how much of it a migration may use."""

from __future__ import annotations

import os

from pydantic import BaseModel, Field

from agent.errors import LLMFailure

BASE_URL_ENV = "FERRY_LLM_BASE_URL"
MODEL_ENV = "FERRY_LLM_MODEL"
KEY_ENVS = ("FERRY_LLM_API_KEY", "OPENAI_API_KEY")


class LLMConfig(BaseModel):
    base_url: str | None = Field(default=None, description="None: the openai client's default (OpenAI)")
    model: str
    api_key: str = Field(repr=False)
    request_timeout_s: float = 120.0
    max_retries: int = Field(default=4, ge=0)
    backoff_s: float = Field(default=1.0, ge=0)
    max_calls: int = Field(default=30, ge=1)
    max_tokens: int = Field(default=200_000, ge=1)
    max_wall_s: float = Field(default=900.0, gt=0)
    max_malformed: int = Field(default=3, ge=0, description="malformed tool calls sent back before giving up")
    max_turns: int = Field(default=12, ge=1, description="model turns per fix attempt")


def configured() -> bool:
    """Whether the environment names a model server (FERRY_LLM_BASE_URL + FERRY_LLM_MODEL + a key)."""
    return bool(os.environ.get(BASE_URL_ENV) and os.environ.get(MODEL_ENV) and any(os.environ.get(k) for k in KEY_ENVS))


def from_env(*, model: str | None = None, base_url: str | None = None, max_calls: int | None = None,
             max_tokens: int | None = None, max_wall_s: float | None = None) -> LLMConfig:
    model = model or os.environ.get(MODEL_ENV)
    base_url = base_url or os.environ.get(BASE_URL_ENV) or None
    key = next((os.environ[k] for k in KEY_ENVS if os.environ.get(k)), None)
    if not model:
        raise LLMFailure(f"--llm needs a model name: set {MODEL_ENV} (and {BASE_URL_ENV} for a non-OpenAI server)")
    if not key:
        if base_url:
            key = "unused"  # local OpenAI-compatible servers (vLLM, Ollama) accept any key
        else:
            raise LLMFailure(f"--llm needs an API key: set {KEY_ENVS[0]} or {KEY_ENVS[1]}")
    cfg = LLMConfig(model=model, base_url=base_url, api_key=key)
    return cfg.model_copy(update={k: v for k, v in (("max_calls", max_calls), ("max_tokens", max_tokens),
                                                    ("max_wall_s", max_wall_s)) if v is not None})
