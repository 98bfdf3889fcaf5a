"""Where the model is and how much of it a migration may use.

The limits (per-request timeout, retries, backoff, the LLM wall budget, calls, tokens, reply size)
come from ``ferry migrate``'s flags, else the environment (``FERRY_LLM_*``), else the defaults
in :mod:`agent.settings`; :func:`resolve_limits` checks each and names the flag or variable that is wrong.
"""

from __future__ import annotations

from pydantic import Field

from agent.errors import LLMFailure
from agent.settings import DEFAULTS, LIMIT_SOURCES, LLMLimits, resolve_limits, settings

__all__ = [
    "BASE_URL_ENV",
    "DEFAULTS",
    "KEY_ENVS",
    "LIMIT_SOURCES",
    "MODEL_ENV",
    "LLMConfig",
    "LLMLimits",
    "configured",
    "from_env",
    "resolve_limits",
]

BASE_URL_ENV = "FERRY_LLM_BASE_URL"
MODEL_ENV = "FERRY_LLM_MODEL"
KEY_ENVS = ("FERRY_LLM_API_KEY", "OPENAI_API_KEY")


class LLMConfig(LLMLimits):
    base_url: str | None = Field(default=None, description="None: the openai client's default (OpenAI)")
    model: str
    api_key: str = Field(repr=False)
    max_malformed: int = Field(default=3, ge=0, description="malformed tool calls sent back before giving up")
    max_turns: int = Field(default=12, ge=1, description="model turns per fix attempt")
    max_cost_usd: float | None = Field(default=None, gt=0, allow_inf_nan=False, description=(
        "the cost cap in US dollars, the approved extra included (None: no cap in money)"))


def configured() -> bool:
    """Whether the environment names a model server (FERRY_LLM_BASE_URL + FERRY_LLM_MODEL + a key)."""
    return settings().llm.configured()


def from_env(*, model: str | None = None, base_url: str | None = None, limits: LLMLimits | None = None) -> LLMConfig:
    """The model server (arguments, else FERRY_LLM_MODEL / FERRY_LLM_BASE_URL / a key) with ``limits``."""
    env = settings().llm
    model = model or env.model
    base_url = base_url or env.base_url or None
    key = env.key()
    if not model:
        raise LLMFailure(f"--llm needs a model name: set {MODEL_ENV} (and {BASE_URL_ENV} for a non-OpenAI server)")
    if not key:
        if base_url:
            key = "unused"  # local OpenAI-compatible servers (vLLM, Ollama) accept any key
        else:
            raise LLMFailure(f"--llm needs an API key: set {KEY_ENVS[0]} or {KEY_ENVS[1]}")
    return LLMConfig(model=model, base_url=base_url, api_key=key, **(limits or DEFAULTS).model_dump())
