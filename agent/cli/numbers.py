"""The argparse types of the CLI's numeric flags: finite numbers in a range, or argparse's usage error.

``type=`` of a flag: argparse calls it on the text and turns the ArgumentTypeError into exit 2 with
``argument --flag: <message>``, so a ``nan``, ``inf``, negative or huge value never reaches a model or
a sandbox. Environment defaults come from :mod:`agent.settings`, which names the variable.
"""

from __future__ import annotations

import argparse
import math
from typing import TypeVar

T = TypeVar("T")

MAX_INT = 2**63 - 1
SEED_MAX = 2**32 - 1  # numpy's seed range
MAX_SECONDS = 10 * 365 * 86400.0  # past ten years a time limit is a typo (and overflows timers)
MAX_GB = 2**20
_MAX_DIGITS = 30


_MAX_CHARS = 64  # no number a flag takes is longer; the whole text is parsed, never a cut of it


def _text(text: str) -> str:
    raw = str(text).strip()
    if len(raw) > _MAX_CHARS:
        raise argparse.ArgumentTypeError(f"must be a plain number, got {len(raw)} characters "
                                         f"({_shown(raw)})")
    return raw


def _shown(raw: str) -> str:
    """The value as an error message quotes it: at most 40 characters."""
    return repr(raw) if len(raw) <= 40 else repr(raw[:40]) + "..."


def _integer(text: str, low: int, high: int, what: str) -> int:
    raw = _text(text)
    body = raw[1:] if raw[:1] in "+-" else raw
    if not body.isdigit() or len(body) > _MAX_DIGITS:  # isdigit: no '1e3', no '1.5', no 'nan'
        raise argparse.ArgumentTypeError(f"must be {what}, got {_shown(raw)}")
    value = int(raw)
    if not low <= value <= high:
        raise argparse.ArgumentTypeError(f"must be {what}, got {_shown(raw)}")
    return value


def positive_int(text: str) -> int:
    """A whole number of 1 or more."""
    return _integer(text, 1, MAX_INT, "a whole number of 1 or more")


def non_negative_int(text: str) -> int:
    """A whole number of 0 or more."""
    return _integer(text, 0, MAX_INT, "a whole number of 0 or more")


def seed(text: str) -> int:
    """A random seed: 0 .. 2**32-1 (what random, numpy and torch all accept)."""
    return _integer(text, 0, SEED_MAX, f"a whole number from 0 to {SEED_MAX}")


def port(text: str) -> int:
    """A TCP port, 0 (any free one) .. 65535."""
    return _integer(text, 0, 65535, "a port from 0 to 65535 (0: any free port)")


def positive_float(text: str) -> float:
    """A finite number above 0 (not nan, not inf)."""
    raw = _text(text)
    try:
        value = float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number above 0, got {_shown(raw)}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number above 0, got {_shown(raw)}")
    return value


def seconds(text: str) -> float:
    """A time limit: a finite number of seconds above 0 and at most ten years."""
    value = positive_float(text)
    if value > MAX_SECONDS:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_SECONDS:.0f} seconds, got {_shown(_text(text))}")
    return value


def gigabytes(text: str) -> float:
    """A memory size in GB: a finite number above 0 and at most 2**20 (a PiB)."""
    value = positive_float(text)
    if value > MAX_GB:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_GB} (GB), got {_shown(_text(text))}")
    return value


def non_negative_float(text: str) -> float:
    """A finite number of 0 or more."""
    raw = _text(text)
    try:
        value = float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of 0 or more, got {_shown(raw)}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number of 0 or more, got {_shown(raw)}")
    return value


def non_negative_seconds(text: str) -> float:
    """A pause: a finite number of seconds of 0 or more and at most ten years."""
    value = non_negative_float(text)
    if value > MAX_SECONDS:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_SECONDS:.0f} seconds, got {_shown(_text(text))}")
    return value
