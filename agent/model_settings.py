"""How much of the model a migration may use, and whether the environment names a model server.

The limits (per-request timeout, retries, backoff, the LLM wall budget, calls, tokens, reply size)
come from ``ferry migrate``'s flags, else the environment (``FERRY_LLM_*``), else the defaults
below; :func:`resolve_limits` checks each and names the flag or variable that is wrong. They are part
of a migration's options (``agent.migration.options``), so they sit below the migration and the model
client (``agent.llm.config`` builds the client's configuration from them).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from pydantic import BaseModel, Field, ValidationError

BASE_URL_ENV = "FERRY_LLM_BASE_URL"
MODEL_ENV = "FERRY_LLM_MODEL"
KEY_ENVS = ("FERRY_LLM_API_KEY", "OPENAI_API_KEY")


class LLMLimits(BaseModel):
    """How long and how much: every field has a flag of ``ferry migrate`` and an environment variable."""

    request_timeout_s: float = Field(default=60.0, gt=0, allow_inf_nan=False,
                                     description="one request, capped by the wall budget left")
    max_retries: int = Field(default=4, ge=0, description="retries of a timeout, 429, 5xx or refused connection")
    backoff_s: float = Field(default=1.0, ge=0, allow_inf_nan=False, description="first backoff; doubles each retry")
    max_wall_s: float = Field(default=900.0, gt=0, allow_inf_nan=False,
                              description="all the model's use in one migration")
    max_calls: int = Field(default=30, ge=1)
    max_tokens: int = Field(default=200_000, ge=1)
    max_reply_chars: int = Field(default=200_000, ge=1, description="a reply's content or one tool call's arguments")


DEFAULTS = LLMLimits()

# field -> (flag of ferry migrate / ferry eval, environment variable)
LIMIT_SOURCES: dict[str, tuple[str, str]] = {
    "request_timeout_s": ("--llm-timeout", "FERRY_LLM_TIMEOUT_S"),
    "max_retries": ("--llm-retries", "FERRY_LLM_RETRIES"),
    "backoff_s": ("--llm-backoff", "FERRY_LLM_BACKOFF_S"),
    "max_wall_s": ("--llm-max-wall", "FERRY_LLM_MAX_WALL_S"),
    "max_calls": ("--llm-max-calls", "FERRY_LLM_MAX_CALLS"),
    "max_tokens": ("--llm-max-tokens", "FERRY_LLM_MAX_TOKENS"),
    "max_reply_chars": ("--llm-max-reply-chars", "FERRY_LLM_MAX_REPLY_CHARS"),
}


def _check(field: str, value: object, source: str) -> object:
    """``value`` (a flag's or a variable's) checked against ``field``'s type and bounds."""
    info = LLMLimits.model_fields[field]
    try:
        return LLMLimits.model_validate({field: value}).model_dump()[field]
    except ValidationError as exc:
        problem = "; ".join(e["msg"] for e in exc.errors(include_url=False))
        raise ValueError(f"{source}: {problem}, got {value!r} ({info.description or field})") from None


def resolve_limits(flags: Mapping[str, object | None], environ: Mapping[str, str] | None = None) -> LLMLimits:
    """The limits from ``flags`` (field -> value, None when not given), else ``environ``'s FERRY_LLM_*,
    else the defaults. ValueError names the flag or variable whose value is wrong."""
    environ = os.environ if environ is None else environ
    out: dict[str, object] = {}
    for field, (flag, env) in LIMIT_SOURCES.items():
        if flags.get(field) is not None:
            out[field] = _check(field, flags[field], flag)
        elif environ.get(env, "").strip():
            out[field] = _check(field, environ[env].strip(), f"${env}")
    return LLMLimits.model_validate(out)


def configured() -> bool:
    """Whether the environment names a model server (FERRY_LLM_BASE_URL + FERRY_LLM_MODEL + a key)."""
    return bool(os.environ.get(BASE_URL_ENV) and os.environ.get(MODEL_ENV) and any(os.environ.get(k) for k in KEY_ENVS))
