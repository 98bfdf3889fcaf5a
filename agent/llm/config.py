"""Where the model is: the server, model name and key a migration's model calls use, with its limits.

The limits themselves and the environment variables that name the server are in
``agent.model_settings`` (a migration's options hold the limits).
"""

from __future__ import annotations

import os

from pydantic import Field

from agent.errors import LLMFailure
from agent.model_settings import BASE_URL_ENV, DEFAULTS, KEY_ENVS, MODEL_ENV, LLMLimits


class LLMConfig(LLMLimits):
    base_url: str | None = Field(default=None, description="None: the openai client's default (OpenAI)")
    model: str
    api_key: str = Field(repr=False)
    max_malformed: int = Field(default=3, ge=0, description="malformed tool calls sent back before giving up")
    max_turns: int = Field(default=12, ge=1, description="model turns per fix attempt")


def from_env(*, model: str | None = None, base_url: str | None = None, limits: LLMLimits | None = None) -> LLMConfig:
    """The model server (arguments, else FERRY_LLM_MODEL / FERRY_LLM_BASE_URL / a key) with ``limits``."""
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
    return LLMConfig(model=model, base_url=base_url, api_key=key, **(limits or DEFAULTS).model_dump())
