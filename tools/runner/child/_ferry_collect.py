"""A pytest plugin Ferry loads into a run that only collects the tests (``--collect-only -p _ferry_collect``):
the node ids of the tests pytest would run, written as the run's junit report names them, so that the host
compares them with another run's junit outcomes as they are (``tools.guard.outcomes.not_collected``).

Runs inside the user's process: the standard library only, and pytest's own helpers where they are there
(the junit names are made by the same pytest that would write the report; without them a copy of their rule
is used). Nothing here may break the user's run: every failure is logged at debug and the file is left out.
The file (JSON) goes to ``$FERRY_COLLECT_OUT``: ``{"tests": ["tests/test_x.py::test_a", ...]}``; a command
that runs pytest more than once adds each session's tests to it.
"""

from __future__ import annotations

import json
import logging
import os
import re
from typing import Any

_log = logging.getLogger("ferry.collect")


def _mangle(nodeid: str) -> list[str]:
    """pytest's junit naming of a node id (``mangle_test_address``): the file as a dotted path, each name,
    the parameters kept on the last."""
    try:
        from _pytest.junitxml import mangle_test_address

        return list(mangle_test_address(nodeid))
    except Exception as exc:  # an older or newer pytest without it: the same rule, written here
        _log.debug("ferry collect: pytest's junit naming not found: %s", exc)
    path, bracket, params = nodeid.partition("[")
    names = path.split("::")
    names[0] = re.sub(r"\.py$", "", names[0].replace("/", "."))
    names[-1] += bracket + params
    return names


def _escape(text: str) -> str:
    try:
        from _pytest.junitxml import bin_xml_escape

        return str(bin_xml_escape(text))
    except Exception:
        return text


def _junit_id(item: Any, family: str, prefix: str | None) -> str:
    """The node id Ferry reads from the junit report for ``item`` (tools.trace.pytest_out.read_junit_xml):
    ``file::name`` where the report names the file (xunit1), else the class name as a path."""
    names = _mangle(item.nodeid)
    name = _escape(names[-1])
    if family == "xunit1":
        file = item.location[0]
        if file:
            return f"{file}::{name}"
    classnames = ([prefix] if prefix else []) + names[:-1]
    classname = ".".join(classnames)
    return f"{classname.replace('.', '/')}.py::{name}" if classname else name


def pytest_collection_finish(session: Any) -> None:
    out = os.environ.get("FERRY_COLLECT_OUT")
    if not out:
        return
    try:
        config = session.config
        try:
            family = str(config.getini("junit_family"))
        except (ValueError, KeyError):  # the junitxml plugin is off: the report is not written either way
            family = "xunit2"
        prefix = config.getoption("junitprefix", None)
        tests = [_junit_id(item, family, prefix) for item in session.items]
        seen: list[str] = []
        if os.path.isfile(out):  # an earlier pytest session of the same command
            with open(out, encoding="utf-8") as fh:
                seen = list(json.load(fh).get("tests", []))
        with open(out, "w", encoding="utf-8") as fh:
            json.dump({"tests": seen + tests}, fh)
    except Exception as exc:  # never the user's run's problem: the host then runs the tests in full
        _log.debug("ferry collect: the collected tests were not written: %s", exc)
