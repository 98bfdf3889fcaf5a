"""Probe settings: what to record and how much (read from ``FERRY_PROBE_*`` env vars; child side)."""

from __future__ import annotations

import logging
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..guest import sibling

if TYPE_CHECKING:
    from sandbox.envvars import EnvVarError, env_enabled, env_int
else:  # Ferry's sandbox.envvars (standard library only) under the root this code runs under
    _envvars = sibling("sandbox.envvars")
    EnvVarError, env_enabled, env_int = _envvars.EnvVarError, _envvars.env_enabled, _envvars.env_int

logger = logging.getLogger(__name__)

DEFAULT_STEPS = 2
# FERRY_PROBE_END=1: the probe ends the program once its recorded steps are done (an evidence run of a
# migration: only the first steps are compared). It writes the dump, then ENDED_FILE in the dump dir, and
# ends the process with ENDED_EXIT_CODE; the runner (tools.runner.api) reports such a run as ``ended``.
ENDED_FILE = "ended.json"
ENDED_EXIT_CODE = 86
# Optimizer steps whose gradients, optimizer state and updated parameters are recorded.
DEFAULT_GRAD_STEPS = 1
DEFAULT_MAX_BYTES = 64 * 1024 * 1024
# Outermost-module calls recorded per step and mode: a sampling loop run inside a step (500
# forwards of minGPT's chargpt callback) is recorded for its first few calls, not call by call.
DEFAULT_CALLS_PER_STEP = 4
# Events in the index (it is rewritten at every flush, so its size bounds what a flush costs).
DEFAULT_MAX_EVENTS = 20_000
# Printed scalars: ``name=value``, ``name: value`` (a quoted name too: a printed dict) or
# ``name value``, several per line; the value a number in any notation (``1.2e-05``, ``nan``),
# also as ``tensor(0.5, ...)``. Which names count is decided by tools/probe/scalar_names.py
# (results, not timings, memory or device names: those always differ between runs).
SCALAR_NAME = r"[A-Za-z][A-Za-z0-9_./-]*"
NUMBER = r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?|[-+]?nan|[-+]?inf(?:inity)?"
# not a version (1.2.3), a time of day (12:30), a date (2024-01-05), a count (45/100) or a word
_VALUE_END = r"(?![A-Za-z0-9_]|\.\d|[:/-]\d)"
DEFAULT_SCALAR_PATTERN = (
    rf"(?i)(?<![A-Za-z0-9_])(?P<name>{SCALAR_NAME})(?P<sep>['\"]?\s*[:=]\s*|\s+)"
    rf"(?:(?:tensor|array)\(\s*)?(?P<value>{NUMBER}){_VALUE_END}"
)

@dataclass
class ProbeConfig:
    """What a probed run records. Every bound exists so a probe cannot fill a disk.

    A dataclass, not a pydantic model: it is built inside the user's interpreter, which has the
    standard library and torch only. A value out of its bounds is a ValueError naming it."""

    out_dir: Path
    steps: int = DEFAULT_STEPS  # record module calls for the first N steps
    max_bytes: int = DEFAULT_MAX_BYTES  # cap on tensor bytes written; reaching it stops the recording
    # outermost-module calls recorded per step and mode (train / eval / no-grad); later ones run unrecorded
    calls_per_step: int = DEFAULT_CALLS_PER_STEP
    max_events: int = DEFAULT_MAX_EVENTS  # cap on index events; reaching it stops the recording
    scalar_pattern: str = DEFAULT_SCALAR_PATTERN
    record_inputs: bool = True
    op_census: bool = True  # list the torch functions each module calls (first step)
    capture_streams: bool = True  # scan stdout/stderr for scalar streams
    record_saves: bool = True  # record the tensors/arrays the program saves (torch.save, numpy.save/savez)
    record_final: bool = True  # record the program's top-level tensors/arrays at exit
    # each optimizer's steps 0..N-1: gradients before the step, optimizer state and parameters after it
    grad_steps: int = DEFAULT_GRAD_STEPS
    # end the program once the recorded steps (module calls and gradients) are done: main process only
    end_after_steps: bool = False

    def __post_init__(self) -> None:
        self.out_dir = Path(self.out_dir)
        for name, minimum in (("steps", 0), ("max_bytes", 0), ("calls_per_step", 1), ("max_events", 1),
                              ("grad_steps", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ValueError(f"probe setting {name}={value!r} is not an integer >= {minimum}")
        for name in ("record_inputs", "op_census", "capture_streams", "record_saves", "record_final",
                     "end_after_steps"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"probe setting {name}={getattr(self, name)!r} is not true or false")
        try:
            compiled = re.compile(self.scalar_pattern)
        except (re.error, TypeError) as exc:
            raise ValueError(f"FERRY_PROBE_SCALAR_PATTERN is not a valid regex: {exc}") from exc
        if "value" not in compiled.groupindex:
            raise ValueError("FERRY_PROBE_SCALAR_PATTERN needs a named group (?P<value>...) for the number")

    def as_json(self) -> dict[str, Any]:
        """The settings as JSON values (the dump's ``meta.config``)."""
        data = asdict(self)
        data["out_dir"] = str(self.out_dir)
        return data


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
        record_saves=env_enabled("FERRY_PROBE_SAVES", env),
        record_final=env_enabled("FERRY_PROBE_FINAL", env),
        grad_steps=_env_int(env, "FERRY_PROBE_GRAD_STEPS", DEFAULT_GRAD_STEPS, minimum=0),
        end_after_steps=env.get("FERRY_PROBE_END", "") == "1",
    )
