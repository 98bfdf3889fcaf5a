"""pytest's failure output (non-native traceback styles) and its junit XML.

The junit XML is written by the sandboxed run (pytest there, or anything the program put under
its name): it is read through sandbox.artifacts (no links, a regular file, at most
``JUNIT_MAX_BYTES``, at most ``MAX_TAGS`` tags: the tree's memory is bounded), a DOCTYPE or ENTITY
declaration is refused before ElementTree sees it (no entity expansion), and at most
``MAX_TESTCASES`` outcomes are kept.
"""

from __future__ import annotations

import logging
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from xml.parsers import expat

from sandbox.artifacts import ArtifactMissing, ArtifactRefused, read_bytes
from tools.trace.models import Frame, Outcome, TestOutcome, Trace

logger = logging.getLogger(__name__)

JUNIT_MAX_BYTES = 32 * 1024**2
MAX_TESTCASES = 50_000
MAX_TAGS = 2_000_000  # 50 000 test cases with a failure each are some 300 000
# a <testcase>'s child element -> its outcome (no such child: passed)
_OUTCOME_OF_TAG: dict[str, Outcome] = {"failure": "failed", "error": "error", "skipped": "skipped"}


class JunitRefused(ValueError):
    """The junit XML was not parsed: unsafe to read (a link, too large) or not plain XML (a DTD)."""

SECTION = re.compile(r"^_{3,} (?P<name>.+?) _{3,}$")
LOCATION = re.compile(r"^(?P<file>[^\s:][^:]*\.py):(?P<line>\d+):(?: in (?P<func>\S+)| (?P<exc>[\w.]+))?\s*$")
E_LINE = re.compile(r"^E\s{1,3}(?P<text>.*)$")
EXC = re.compile(r"^(?P<type>[A-Za-z_][\w.]*(?:Error|Exception|Exit|Failure|Interrupt))(?::\s?(?P<msg>.*))?$")
SUMMARY = re.compile(r"^(?P<outcome>FAILED|ERROR) (?P<nodeid>\S+)(?: - (?P<msg>.*))?$")


def parse_pytest_output(text: str, roots: list[str],
                        build: Callable[[str, str, list[Frame], list[str]], Trace]) -> Trace | None:
    """The first failing test's exception, from pytest's long/short traceback output."""
    lines = text.splitlines()
    tests: list[TestOutcome] = []
    for line in lines:
        m = SUMMARY.match(line.strip())
        if m:
            tests.append(TestOutcome(nodeid=m["nodeid"], outcome="failed" if m["outcome"] == "FAILED" else "error",
                                     message=m["msg"]))
    first: Trace | None = None
    i, n = 0, len(lines)
    while i < n and first is None:
        if not SECTION.match(lines[i]):
            i += 1
            continue
        i += 1
        frames: list[Frame] = []
        exc_type, message = None, []
        last_source: str | None = None
        while i < n and not SECTION.match(lines[i]) and not lines[i].startswith("====="):
            line = lines[i]
            em = E_LINE.match(line)
            lm = LOCATION.match(line)
            if em:
                body = em["text"]
                m = EXC.match(body.strip())
                if exc_type is None and m:
                    exc_type, message = m["type"], [m["msg"] or ""]
                elif exc_type is not None:
                    message.append(body.strip())
            elif lm:
                frames.append(Frame(file=lm["file"], line=int(lm["line"]), function=lm["func"], source=last_source))
                if lm["exc"] and exc_type is None:
                    exc_type = lm["exc"]
            elif line.startswith(">"):
                last_source = line[1:].strip()
            elif line.startswith("    ") and line.strip():
                last_source = line.strip()
            i += 1
        if exc_type:
            first = build(exc_type, "\n".join(message).strip(), frames, roots)
    if first is None and tests:
        msg = tests[0].message or ""
        m = EXC.match(msg)
        first = build(m["type"] if m else "TestFailure", (m["msg"] or "") if m else msg, [], roots)
    if first is not None and tests:
        first.tests = tests
    return first


def _refuse_declarations(data: bytes) -> None:
    """Raise ``JunitRefused`` for a DOCTYPE or ENTITY declaration (expat sees every encoding)."""

    def refuse(*_: object) -> None:
        raise JunitRefused("the junit XML declares a DOCTYPE/ENTITY (refused: entity expansion); pytest writes none")

    parser = expat.ParserCreate()
    parser.StartDoctypeDeclHandler = refuse
    parser.EntityDeclHandler = refuse
    try:
        parser.Parse(data, True)
    except expat.ExpatError as exc:
        raise JunitRefused(f"the junit XML is not well-formed: {exc}") from None


def read_junit_xml(path: Path) -> list[TestOutcome]:
    """Per-test outcomes from a pytest ``--junitxml`` report; ``JunitRefused`` says why not
    (``ArtifactMissing`` when there is none)."""
    path = Path(path)
    try:
        data = read_bytes(path.parent, path.name, max_bytes=JUNIT_MAX_BYTES)
    except ArtifactMissing:
        raise
    except ArtifactRefused as exc:
        raise JunitRefused(f"the junit XML was not read: {exc.reason}") from None
    _refuse_declarations(data)
    tags = data.count(b"<")  # an upper bound of the elements (markup, comments, CDATA): counted in C
    if tags > MAX_TAGS:  # a tree costs ~100 bytes an element: 32 MiB of empty ones took some 800 MB
        raise JunitRefused(f"the junit XML holds {tags} tags, more than the {MAX_TAGS} of a large real report")
    try:
        root = ET.fromstring(data)
    except ET.ParseError as exc:
        raise JunitRefused(f"the junit XML is not well-formed: {exc}") from None
    outcomes: list[TestOutcome] = []
    for case in root.iter("testcase"):
        if len(outcomes) >= MAX_TESTCASES:
            logger.warning("junit XML %s: more than %d test cases; the rest are left out", path, MAX_TESTCASES)
            break
        classname, name = case.get("classname", ""), case.get("name", "")
        file = case.get("file")
        nodeid = f"{file}::{name}" if file else (f"{classname.replace('.', '/')}.py::{name}" if classname else name)
        outcome: Outcome = "passed"
        message: str | None = None
        for child in case:
            if child.tag in _OUTCOME_OF_TAG:
                outcome = _OUTCOME_OF_TAG[child.tag]
                message = (child.get("message") or (child.text or "").strip())[:500] or None
                break
        line = case.get("line")
        try:
            duration = float(case.get("time", "")) if case.get("time") else None
        except ValueError:
            duration = None
        outcomes.append(TestOutcome(nodeid=nodeid, outcome=outcome, message=message, file=file,
                                    line=int(line) + 1 if line and line.isdigit() and len(line) < 10 else None,
                                    duration_s=duration))
    return outcomes


def parse_junit_xml(path: Path) -> list[TestOutcome]:
    """``read_junit_xml``, with a refusal logged and no outcomes returned (none when there is no file)."""
    try:
        return read_junit_xml(path)
    except ArtifactMissing:
        return []
    except JunitRefused as exc:
        logger.warning("cannot read junit XML %s: %s", path, exc)
        return []
