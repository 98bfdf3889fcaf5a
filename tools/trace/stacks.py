"""Teardown hangs: the stacks ``faulthandler`` wrote for a run's stuck processes, as a ``Trace``.

The dumps come out of the sandboxed run (collected through ``sandbox.artifacts``: regular files,
no links, size caps); they are read capped again here, decoded leniently and escaped before any of
their text is kept. Format (CPython's faulthandler, ``all_threads=True``)::

    Thread 0x00007f3c2d1fe640 (most recent call first):
      File "/ws/train.py", line 12 in spin
      ...

    Current thread 0x00007f3c2e5c2740 (most recent call first):
      File "/ws/train.py", line 40 in <module>
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from tools.textsafe import terminal
from tools.trace.models import Frame, ProcessStack, Signature, Trace
from tools.trace.parse import user_frame

MAX_STACK_BYTES = 64 * 1024  # of one process's dump
MAX_PROCESSES = 16
MAX_FRAMES = 200  # per thread
_HEADER = re.compile(r"^(Current thread|Thread) 0x[0-9a-f]+ \(most recent call first\):\s*$")
_FRAME = re.compile(r'^\s+File "(?P<file>[^"\n]{1,4096})", line (?P<line>\d{1,9}) in (?P<func>[^\n]{1,300})$')
DETAIL = ("the program did its work and printed its output, but a process did not exit by itself: "
          "Ferry ended the run and kept each stuck process's Python stack")


def parse_dump(text: str) -> list[list[Frame]]:
    """The threads of one dump, each outermost frame first; the thread that runs the main module
    (its outermost frame is ``<module>``) first, else the order of the dump (the current thread first)."""
    threads: list[tuple[bool, list[Frame]]] = []
    frames: list[Frame] | None = None
    for line in text.splitlines():
        head = _HEADER.match(line)
        if head is not None:
            frames = []
            threads.append((head.group(1) == "Current thread", frames))
            continue
        m = _FRAME.match(line)
        if m is not None and frames is not None and len(frames) < MAX_FRAMES:
            frames.append(Frame(file=m["file"], line=int(m["line"]), function=m["func"].strip()))
    ordered = [list(reversed(f)) for _, f in sorted(threads, key=lambda t: not t[0]) if f]
    ordered.sort(key=lambda f: f[0].function != "<module>")
    return ordered


def read_dump(path: Path) -> str:
    """At most ``MAX_STACK_BYTES`` of ``path`` (never through a link), decoded and escaped; '' if unreadable."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return ""
    try:
        with os.fdopen(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                return ""
            data = fh.read(MAX_STACK_BYTES)
    except OSError:
        return ""
    return terminal(data.decode("utf-8", errors="replace"))


def process_stack(stacks_dir: Path | None, pid: int, role: str, shutting_down: bool, stack_file: str | None,
                  roots: list[str], library_roots: list[str]) -> ProcessStack:
    """One stuck process, its dump (``stacks_dir/stack_file``, the collected copy) read and parsed,
    its frames in the repository marked as the user's (relative to it)."""
    text = read_dump(stacks_dir / stack_file) if stacks_dir is not None and stack_file else ""
    threads = [[user_frame(f, roots, library_roots) for f in t] for t in parse_dump(text)]
    return ProcessStack(pid=pid, role=role, shutting_down=shutting_down, threads=threads, text=text)


def _where(frames: list[Frame]) -> str:
    user = [f for f in frames if f.user]
    site = (user or frames)[-1] if frames else None
    if site is None:
        return "no Python frame"
    at = f"{_short(site)}:{site.line} in {site.function}"
    inner = frames[-1]
    if inner is not site:
        at += f" (in {_short(inner)}:{inner.line} {inner.function})"
    return at


def _short(frame: Frame) -> str:
    """A library frame's file from its package on (``torch/distributed/run.py``); a user frame's as it is."""
    if frame.user:
        return frame.file
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in frame.file:
            return frame.file.rsplit(marker, 1)[1]
    return os.path.basename(frame.file)


def teardown_trace(stacks: list[ProcessStack], grace_s: float) -> Trace:
    """The trace of a run ended as hung in its teardown: who did not exit, and where it was."""
    parts = []
    for s in stacks:
        state = "in interpreter shutdown, " if s.shutting_down else ""
        where = _where(s.threads[0]) if s.threads else "it wrote no stack"
        parts.append(f"{s.who} (pid {s.pid}) {state}at {where}")
    who = "; ".join(parts) or "a process of the run"
    message = (f"the run printed its output and then stopped making progress: {who} did not exit "
               f"(idle for {grace_s:.0f}s with nothing printed)")
    first = next((s for s in stacks if s.threads), None)
    frames = first.threads[0] if first is not None else []
    user = [f for f in frames if f.user]
    rank = next((int(s.role[4:]) for s in stacks if s.role.startswith("rank")), None)
    return Trace(exc_type="TeardownHang", message=message, user_frames=user, library_frames=len(frames) - len(user),
                 signature=Signature(kind="teardown_hang", op=stacks[0].role if stacks else None, detail=DETAIL),
                 origin="subprocess" if rank is not None else "main", rank=rank, stacks=stacks)
