"""Python tracebacks in free text (stderr): frames, exception lines, chains, worker tracebacks."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from tools.trace.models import ExceptionInfo, Frame

TB_HEADER = re.compile(r"^(?P<indent>\s*)Traceback \(most recent call last\):\s*$")
FRAME = re.compile(r'^(?P<indent>\s*)File "(?P<file>[^"]+)", line (?P<line>\d+)(?:, in (?P<func>.+?))?\s*$')
EXC_LINE = re.compile(r"^(?P<type>[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning|Failure|Timeout|Exceeded"
                      r"|Iteration|Raised\w*|[A-Z]\w*))(?::\s?(?P<msg>.*))?$")
CAUSE = "The above exception was the direct cause of the following exception:"
CONTEXT = "During handling of the above exception, another exception occurred:"
CARET = re.compile(r"^\s*[\^~\-]+\s*$")
WORKER_ORIGINAL = re.compile(r"^(?P<indent>\s*)Original Traceback \(most recent call last\):\s*$")
MAX_MESSAGE_LINES = 40


@dataclass
class _Block:
    exc: ExceptionInfo
    start: int
    end: int
    link_before: str | None = None  # "cause"/"context" marker found just before this block
    nested: list[ExceptionInfo] = field(default_factory=list)


def _parse_frames(lines: list[str], i: int) -> tuple[list[Frame], int]:
    frames: list[Frame] = []
    n = len(lines)
    while i < n:
        m = FRAME.match(lines[i])
        if not m:
            stripped = lines[i].strip()
            if stripped.startswith("[Previous line repeated") or stripped == "...":
                i += 1
                continue
            break
        frame = Frame(file=m["file"], line=int(m["line"]), function=m["func"])
        indent = len(m["indent"])
        i += 1
        # Source line, caret lines, and (3.11+) locals are indented deeper than "File".
        while (i < n and lines[i].strip() and (len(lines[i]) - len(lines[i].lstrip())) > indent
               and not FRAME.match(lines[i])):
            if frame.source is None and not CARET.match(lines[i]):
                frame.source = lines[i].strip()
            i += 1
        frames.append(frame)
    return frames, i


def _parse_exception_line(lines: list[str], i: int) -> tuple[str, str, int] | None:
    n = len(lines)
    while i < n and not lines[i].strip():
        i += 1
    if i >= n:
        return None
    m = EXC_LINE.match(lines[i].strip())
    if not m:
        return None
    exc_type, msg_lines = m["type"], [m["msg"] or ""]
    i += 1
    while i < n and len(msg_lines) < MAX_MESSAGE_LINES:
        line = lines[i]
        if TB_HEADER.match(line) or line.strip() in (CAUSE, CONTEXT) or line.startswith(("=====", "_____")):
            break  # (pytest's section rules end a message too)
        if not line.strip():
            # A blank line ends the message unless what follows still belongs to it
            # (DataLoader's "Original Traceback", torch.multiprocessing's "-- Process").
            nxt = lines[i + 1] if i + 1 < n else ""
            if not (nxt.startswith((" ", "\t", "-- Process")) and not FRAME.match(nxt) and not TB_HEADER.match(nxt)):
                break
        msg_lines.append(line)
        i += 1
    return exc_type, "\n".join(msg_lines).strip(), i


def _link_marker(lines: list[str], start: int) -> str | None:
    j = start - 1
    while j >= 0 and not lines[j].strip():
        j -= 1
    if j >= 0:
        if lines[j].strip() == CAUSE:
            return "cause"
        if lines[j].strip() == CONTEXT:
            return "context"
    return None


RANK_PREFIX = re.compile(r"^\[(?:rank|default)\d+\]:\s?", re.M)


def parse_blocks(text: str) -> list[tuple[ExceptionInfo, str | None]]:
    """Every exception printed in ``text``, in order, with the chain marker preceding it."""
    lines = RANK_PREFIX.sub("", text).splitlines()  # torch.distributed / torchrun line prefixes
    out: list[tuple[ExceptionInfo, str | None]] = []
    i, n = 0, len(lines)
    while i < n:
        line = lines[i]
        header = TB_HEADER.match(line)
        frame = FRAME.match(line)
        if header or (frame and frame["func"] is None):
            start = i
            frames, j = _parse_frames(lines, i + 1 if header else i)
            parsed = _parse_exception_line(lines, j)
            is_syntax = parsed is not None and parsed[0].endswith(("SyntaxError", "IndentationError", "TabError"))
            if parsed is None or (not header and not is_syntax):
                i = max(j, i + 1)
                continue
            exc_type, message, k = parsed
            info = ExceptionInfo(exc_type=exc_type, message=message, frames=frames)
            out.append((info, _link_marker(lines, start)))
            i = k
            continue
        i += 1
    return out


def worker_original(info: ExceptionInfo) -> ExceptionInfo | None:
    """The worker's own exception inside a DataLoader "Caught X in DataLoader worker" message."""
    lines = info.message.splitlines()
    for idx, line in enumerate(lines):
        if WORKER_ORIGINAL.match(line):
            body = lines[idx + 1 :]
            frames, j = _parse_frames(body, 0)
            parsed = _parse_exception_line(body, j)
            if parsed is None:
                return None
            exc_type, message, _ = parsed
            return ExceptionInfo(exc_type=exc_type, message=message, frames=frames, origin="dataloader_worker")
    return None
