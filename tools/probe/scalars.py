"""Scalar streams: numbers a program prints (``loss 2.31``), captured by wrapping sys.stdout/err."""

from __future__ import annotations

import logging
import math
import re
from typing import Any, TextIO

from .config import DEFAULT_SCALAR_PATTERN
from .recorder import Recorder
from .scalar_names import is_metric_name, unit_follows

logger = logging.getLogger(__name__)

# A "name" that is a file location: a warning's or traceback's "/ws/.../train.py:30: UserWarning" would
# read as a scalar named by the path (a run-specific sandbox path that can hold "f1", "kl", "auc"...)
# with the line number as its value, and differ between any two runs.
_PATHLIKE = re.compile(r"^(?:/|\.\.?/|~/)|\.(?:py|pyc|pyx|ipynb|so|cpp|cc|cu|c|h)$", re.IGNORECASE)


def parse_scalars(line: str, pattern: re.Pattern[str], default_rules: bool | None = None) -> list[tuple[str, float]]:
    """Every (name, value) the pattern finds in one line of output.

    With the default pattern (``default_rules`` None: decided by the pattern) only metrics count
    (tools/probe/scalar_names.py): timings, memory, device names, step counters and values with a
    unit after them are left out. A pattern of the user's own (FERRY_PROBE_SCALAR_PATTERN) decides alone."""
    if default_rules is None:
        default_rules = pattern.pattern == DEFAULT_SCALAR_PATTERN
    found: list[tuple[str, float]] = []
    for match in pattern.finditer(line):
        groups = match.groupdict()
        raw = groups.get("value")
        if raw is None:
            continue
        try:
            value = float(raw)
        except ValueError:
            continue
        name = (groups.get("name") or "scalar").strip()
        if _PATHLIKE.search(name):
            continue
        if default_rules:
            spaced = not any(c in (groups.get("sep") or "") for c in ":=")
            if not is_metric_name(name, spaced) or unit_follows(line[match.end():]):
                continue
        found.append((name, value if not math.isnan(value) else float("nan")))
    return found


class ScalarTee:
    """A text stream proxy: writes pass through unchanged; complete lines are scanned."""

    def __init__(self, stream: TextIO, recorder: Recorder, pattern: re.Pattern[str]) -> None:
        self._stream = stream
        self._recorder = recorder
        self._pattern = pattern
        self._partial = ""

    def write(self, text: str) -> int:
        written = self._stream.write(text)
        try:
            self._scan(text)
        except Exception:  # never break the user's output
            logger.debug("probe: scalar scan failed", exc_info=True)
        return written

    def _scan(self, text: str) -> None:
        if not isinstance(text, str):
            return
        buf = self._partial + text
        lines = re.split(r"[\r\n]", buf)
        self._partial = lines.pop()[-4096:]
        for line in lines:
            for name, value in parse_scalars(line, self._pattern):
                self._recorder.add_scalar(name, value)

    def finish(self) -> None:
        if self._partial:
            for name, value in parse_scalars(self._partial, self._pattern):
                self._recorder.add_scalar(name, value)
            self._partial = ""

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)
