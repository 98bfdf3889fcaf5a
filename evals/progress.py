"""What an eval run shows while it runs: a live table on a terminal, one line per finished case elsewhere.

On a terminal (stderr a TTY): a table redrawn twice a second, a row per case (queued, running with its
current step or phase such as "grading: hidden tests", done with its grade). In a log or a pipe (CI),
where a redrawn table shows nothing until the end: one line per case as it finishes, flushed at once.
"""

from __future__ import annotations

import sys
import threading
import time
from types import TracebackType
from typing import Literal, TextIO

from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table

Mode = Literal["live", "lines", "off"]


def default_mode(stream: TextIO, no_live: bool) -> Mode:
    """``live`` on a terminal unless asked not to, else ``lines``."""
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        tty = False
    return "live" if tty and not no_live else "lines"


class EvalProgress:
    """A ``ProgressFn`` for ``run_suite``: a live table or lines on ``stream`` (stderr), or nothing."""

    def __init__(self, names: list[str], enabled: bool = True, *, mode: Mode | None = None,
                 stream: TextIO | None = None) -> None:
        self.phases = {n: "queued" for n in names}
        self.detail = dict.fromkeys(names, "")
        self.started: dict[str, float] = {}
        self.stream = stream if stream is not None else sys.stderr
        self.mode: Mode = mode if mode is not None else ("live" if enabled else "off")
        self._lock = threading.Lock()
        self._live = Live(self._table(), console=Console(file=self.stream), refresh_per_second=2,
                          transient=False) if self.mode == "live" else None

    @property
    def enabled(self) -> bool:
        return self.mode != "off"

    def __enter__(self) -> EvalProgress:
        if self._live is not None:
            self._live.__enter__()
        return self

    def __exit__(self, typ: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._live is not None:
            self._live.update(self._table())
            self._live.__exit__(typ, exc, tb)

    def __call__(self, name: str, event: str, detail: str) -> None:
        line = None
        with self._lock:
            if event == "started":
                self.phases[name], self.started[name] = "running", time.monotonic()
            elif event == "finished":
                self.phases[name] = "done"
                done = sum(v == "done" for v in self.phases.values())
                line = f"ferry eval [{done}/{len(self.phases)}] {name}: {detail}"
            if detail or event != "step":
                self.detail[name] = detail
        if self._live is not None:
            self._live.update(self._table())
        elif self.mode == "lines" and line is not None:
            self.stream.write(line + "\n")
            self.stream.flush()

    def _table(self) -> Table:
        counts = {s: sum(v == s for v in self.phases.values()) for s in ("done", "running", "queued")}
        t = Table(title=f"ferry eval: {counts['done']} done, {counts['running']} running, {counts['queued']} queued")
        for col in ("case", "state", "step / result", "s"):
            t.add_column(col)
        now = time.monotonic()
        for name, state in self.phases.items():
            secs = f"{now - self.started.get(name, now):.0f}" if state == "running" else ""
            t.add_row(escape(name), state, escape(self.detail.get(name, "")), secs)
        return t
