"""Settings read from environment variables: on-by-default switches, counts and sizes.

The one reader of ``FERRY_*`` settings for the sandbox, the tools and the agent (standard library
only, so every layer above may import it). Unset, empty and blank variables give the default.
A value that cannot be read raises ``EnvVarError`` (a ``ValueError``) whose message names the
variable, the value and what to give instead; callers that carry on with the default instead
log that message.

- ``env_enabled``: a switch that is on unless set to ``0``, ``false``, ``no`` or ``off``.
- ``env_int``: ``12``, ``100_000``, ``1e6`` (a fraction is cut: ``2.5`` is 2); ``inf``/``nan`` are errors.
- ``parse_size``: ``512M``, ``4G``, ``4GiB``, ``1.5G`` or bytes (K/M/G/T are powers of 1024); read
  from a variable with ``env_value(name, default, parse)``, which names the variable in the error.

The tpx backend keeps its own reader (``backend/config.py``): it may import nothing of Ferry's.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Mapping
from typing import TypeVar

FALSE_WORDS: tuple[str, ...] = ("0", "false", "no", "off")
_SIZE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?\s*$", re.I)

_Default = TypeVar("_Default")
_Value = TypeVar("_Value")


class EnvVarError(ValueError):
    """``name`` holds ``value``, which cannot be read; the message says what to give instead."""

    def __init__(self, message: str, name: str, value: str) -> None:
        super().__init__(message)
        self.name = name
        self.value = value


def env_text(name: str, env: Mapping[str, str] | None = None) -> str | None:
    """The variable's value without surrounding blanks, or None when it is unset, empty or blank."""
    raw = (os.environ if env is None else env).get(name)
    if raw is None or not raw.strip():
        return None
    return raw.strip()


def env_enabled(name: str, env: Mapping[str, str] | None = None) -> bool:
    """An on-by-default switch: False only when set to one of ``FALSE_WORDS`` (any case)."""
    raw = env_text(name, env)
    return raw is None or raw.lower() not in FALSE_WORDS


def parse_int(text: str) -> int | None:
    """``12``, `` 100_000 ``, ``1e6``, ``2.5`` (cut to 2) as an int; None for anything else
    (``inf`` and ``nan`` included)."""
    digits = text.strip().replace("_", "")
    try:
        return int(digits)
    except ValueError:
        pass
    try:
        value = float(digits)
    except ValueError:
        return None
    return int(value) if math.isfinite(value) else None


def env_int(name: str, default: _Default, env: Mapping[str, str] | None = None, *, minimum: int | None = None,
            expected: str = "an integer", hint: str = "") -> int | _Default:
    """A whole number (``parse_int``), at least ``minimum`` when given; otherwise EnvVarError
    ``NAME='value' is not <expected><hint>``."""
    raw = env_text(name, env)
    if raw is None:
        return default
    value = parse_int(raw)
    if value is None or (minimum is not None and value < minimum):
        raise EnvVarError(f"{name}={raw!r} is not {expected}{hint}", name, raw)
    return value


def parse_size(text: str) -> int:
    """``512M``, ``4G``, ``4GiB``, ``1.5G`` or plain bytes (K/M/G/T are powers of 1024, ``B`` and
    ``iB`` optional) as bytes; ValueError saying what is accepted otherwise."""
    m = _SIZE.match(str(text))
    if m is None:
        raise ValueError(f"{text!r} is not a size: give bytes or a number with K, M, G or T (e.g. 512M, 4G, 4GiB)")
    return int(float(m.group(1)) * _SIZE_UNITS[m.group(2).upper()])


def env_value(name: str, default: _Default, parse: Callable[[str], _Value],
              env: Mapping[str, str] | None = None) -> _Value | _Default:
    """``parse(value)``; its ValueError becomes EnvVarError ``NAME='value': <its message>``."""
    raw = env_text(name, env)
    if raw is None:
        return default
    try:
        return parse(raw)
    except ValueError as exc:
        raise EnvVarError(f"{name}={raw!r}: {exc}", name, raw) from None
