"""A pytest plugin Ferry loads into a test run it was asked to measure (``-p _ferry_cov``): line coverage of
the repository's own code with the coverage.py of the run's own interpreter, never one Ferry brings.

Runs inside the user's process: the standard library only (coverage.py is imported from the user's
environment, or its absence is reported), and nothing here may break the user's run: every failure is
written to the report and logged at debug. The report (JSON) goes to ``$FERRY_COVERAGE_OUT``: ``{"percent":
83.4}`` or ``{"error": "..."}``. Test modules and conftest files are left out of the measure.
"""

from __future__ import annotations

import importlib
import io
import json
import logging
import os
from typing import Any

_log = logging.getLogger("ferry.coverage")
_held: dict[str, Any] = {}
_OMIT = ["*/test_*.py", "*_test.py", "*/conftest.py", "*/ferry_grading/*"]


def _write(report: dict[str, object]) -> None:
    out = os.environ.get("FERRY_COVERAGE_OUT")
    if not out:
        return
    try:
        with open(out, "w", encoding="utf-8") as fh:
            json.dump(report, fh)
    except OSError as exc:
        _log.debug("ferry coverage: cannot write %s: %s", out, exc)


def pytest_configure(config: object) -> None:
    if not os.environ.get("FERRY_COVERAGE_OUT"):
        return
    try:
        coverage = importlib.import_module("coverage")  # the user's own, never one Ferry brings
    except ImportError:
        _write({"error": "coverage.py is not installed in the interpreter the tests run with"})
        return
    try:
        root = os.environ.get("FERRY_WORKSPACE") or os.getcwd()
        cov = coverage.Coverage(data_file=None, source=[root], omit=_OMIT, config_file=False)
        cov.start()
        _held["cov"] = cov
    except Exception as exc:  # never the user's run's problem
        _log.debug("ferry coverage: not started: %s", exc)
        _write({"error": f"coverage.py did not start: {type(exc).__name__}: {exc}"})


def pytest_unconfigure(config: object) -> None:
    cov = _held.pop("cov", None)
    if cov is None:
        return
    try:
        cov.stop()
        percent = cov.report(file=io.StringIO(), ignore_errors=True)
        _write({"percent": round(float(percent), 2)})
    except Exception as exc:
        _log.debug("ferry coverage: no report: %s", exc)
        _write({"error": f"coverage.py gave no report: {type(exc).__name__}: {exc}"})
