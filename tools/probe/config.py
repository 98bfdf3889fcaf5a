"""Probe settings: what to record and how much (read from ``FERRY_PROBE_*`` env vars)."""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from pydantic import BaseModel, Field, field_validator

from sandbox.envvars import EnvVarError, env_enabled, env_int

logger = logging.getLogger(__name__)

DEFAULT_STEPS = 2
DEFAULT_MAX_BYTES = 64 * 1024 * 1024
# Outermost-module calls recorded per step and mode: a sampling loop run inside a step (500
# forwards of minGPT's chargpt callback) is recorded for its first few calls, not call by call.
DEFAULT_CALLS_PER_STEP = 4
# Events in the index (it is rewritten at every flush, so its size bounds what a flush costs).
DEFAULT_MAX_EVENTS = 20_000
# Names of printed scalars worth comparing: metrics, not timings (timings always differ).
DEFAULT_SCALAR_NAMES = (
    r"(?:[A-Za-z0-9_./-]*?(?:loss|acc|accuracy|ppl|perplexity|error|score|norm|reward|"
    r"f1|bleu|auc|mse|mae|rmse|nll|kl|logit|metric)[A-Za-z0-9_./-]*)"
)
NUMBER = r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?|[-+]?nan|[-+]?inf"
DEFAULT_SCALAR_PATTERN = (
    rf"(?i)(?<![A-Za-z0-9_])(?P<name>{DEFAULT_SCALAR_NAMES})\s*(?:[:=]\s*|\s+)(?P<value>{NUMBER})(?![A-Za-z0-9_.])"
)


class ProbeConfig(BaseModel):
    """What a probed run records. Every bound exists so a probe cannot fill a disk."""

    out_dir: Path
    steps: int = Field(DEFAULT_STEPS, ge=0, description="record module calls for the first N steps")
    max_bytes: int = Field(DEFAULT_MAX_BYTES, ge=0,
                           description="cap on tensor bytes written; reaching it stops the recording")
    calls_per_step: int = Field(DEFAULT_CALLS_PER_STEP, ge=1, description=(
        "outermost-module calls recorded per step and mode (train / eval / no-grad); later ones run unrecorded"))
    max_events: int = Field(DEFAULT_MAX_EVENTS, ge=1,
                            description="cap on index events; reaching it stops the recording")
    scalar_pattern: str = DEFAULT_SCALAR_PATTERN
    record_inputs: bool = True
    op_census: bool = Field(True, description="list the torch functions each module calls (first step)")
    capture_streams: bool = Field(True, description="scan stdout/stderr for scalar streams")

    @field_validator("scalar_pattern")
    @classmethod
    def _valid_pattern(cls, value: str) -> str:
        try:
            compiled = re.compile(value)
        except re.error as exc:
            raise ValueError(f"FERRY_PROBE_SCALAR_PATTERN is not a valid regex: {exc}") from exc
        if "value" not in compiled.groupindex:
            raise ValueError("FERRY_PROBE_SCALAR_PATTERN needs a named group (?P<value>...) for the number")
        return value


def _env_int(env: dict[str, str], key: str, default: int, minimum: int | None = None) -> int:
    """A bad count is warned about, not an error: the probe runs inside the user's program."""
    try:
        return env_int(key, default, env, minimum=minimum,
                       expected="an integer" if minimum is None else f"an integer >= {minimum}")
    except EnvVarError as exc:
        logger.warning("%s; using %d", exc, default)
        return default


def config_from_env(env: dict[str, str] | None = None) -> ProbeConfig | None:
    """Build the config from ``FERRY_PROBE_*``; ``None`` when ``FERRY_PROBE_DIR`` is unset."""
    env = dict(os.environ if env is None else env)
    out = env.get("FERRY_PROBE_DIR")
    if not out:
        return None
    return ProbeConfig(
        out_dir=Path(out),
        steps=_env_int(env, "FERRY_PROBE_STEPS", DEFAULT_STEPS),
        max_bytes=_env_int(env, "FERRY_PROBE_MAX_BYTES", DEFAULT_MAX_BYTES),
        calls_per_step=_env_int(env, "FERRY_PROBE_CALLS_PER_STEP", DEFAULT_CALLS_PER_STEP, minimum=1),
        max_events=_env_int(env, "FERRY_PROBE_MAX_EVENTS", DEFAULT_MAX_EVENTS, minimum=1),
        scalar_pattern=env.get("FERRY_PROBE_SCALAR_PATTERN") or DEFAULT_SCALAR_PATTERN,
        record_inputs=env_enabled("FERRY_PROBE_INPUTS", env),
        op_census=env_enabled("FERRY_PROBE_OP_CENSUS", env),
        capture_streams=env_enabled("FERRY_PROBE_STREAMS", env),
    )
