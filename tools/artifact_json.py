"""Reading a run's JSON artifacts: a guarded read (sandbox.artifacts), JSON parsing, a pydantic model.

What a run wrote is untrusted input: a forged file gets one clear message (which file, which
field, what was wrong), never a traceback, a KeyError or a path outside the run's directory.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from sandbox.artifacts import MAX_JSON_VALUES_ENV, ArtifactLimits, read_text

M = TypeVar("M", bound=BaseModel)
MAX_PROBLEMS = 3


class InvalidArtifact(ValueError):
    """A run's artifact is readable but not what Ferry writes (forged, truncated, another format)."""


def max_file_bytes() -> int:
    """The per-file read cap (``FERRY_ARTIFACT_MAX_FILE_BYTES``)."""
    return ArtifactLimits.from_env().max_file_bytes


def max_values() -> int:
    """How many JSON values an artifact may hold (``FERRY_ARTIFACT_MAX_JSON_VALUES``)."""
    return ArtifactLimits.from_env().max_json_values


def load_json(base: Path | str, name: str, *, max_bytes: int | None = None) -> Any:
    """``base/name`` parsed as JSON, read through sandbox.artifacts (``ArtifactRefused`` /
    ``ArtifactMissing`` when it cannot be read safely; ``InvalidArtifact`` when it is not JSON)."""
    text = read_text(base, name, max_bytes=max_file_bytes() if max_bytes is None else max_bytes)
    values = text.count(",") + text.count("[") + text.count("{")  # about the values it holds (counted in C)
    cap = max_values()
    if values > cap:
        raise InvalidArtifact(f"{name} holds about {values} JSON values, more than the {cap} Ferry reads "
                              f"(raise {MAX_JSON_VALUES_ENV} if a real run needs more)")
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:  # bad JSON, a 5000-digit number, nesting too deep
        raise InvalidArtifact(f"{name} is not valid JSON: {str(exc)[:200]}") from None


def problems(exc: ValidationError) -> str:
    """The first few validation problems as ``field.path: message`` (input values left out)."""
    errors = exc.errors(include_url=False, include_input=False)
    shown = [f"{'.'.join(str(p) for p in e['loc']) or '(top level)'}: {e['msg']}" for e in errors[:MAX_PROBLEMS]]
    more = f" (and {len(errors) - MAX_PROBLEMS} more)" if len(errors) > MAX_PROBLEMS else ""
    return "; ".join(shown) + more


def validate(model: type[M], data: Any, what: str) -> M:
    """``data`` as ``model``; ``InvalidArtifact`` naming ``what`` and the fields that were wrong."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise InvalidArtifact(f"{what} is not what Ferry writes: {problems(exc)}") from None
