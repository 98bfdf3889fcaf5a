"""The live display of an eval run: cases done / running / queued, and the current step of each."""

from __future__ import annotations

import threading
import time
from types import TracebackType

from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table


class EvalProgress:
    """A ``ProgressFn`` for ``run_suite`` that redraws a table on stderr (nothing when disabled)."""

    def __init__(self, names: list[str], enabled: bool = True) -> None:
        self.state = {n: "queued" for n in names}
        self.detail = dict.fromkeys(names, "")
        self.started: dict[str, float] = {}
        self.enabled = enabled
        self._lock = threading.Lock()
        self._live = Live(self._table(), console=Console(stderr=True), refresh_per_second=2, transient=False) \
            if enabled else None

    def __enter__(self) -> EvalProgress:
        if self._live is not None:
            self._live.__enter__()
        return self

    def __exit__(self, typ: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._live is not None:
            self._live.update(self._table())
            self._live.__exit__(typ, exc, tb)

    def __call__(self, name: str, event: str, detail: str) -> None:
        with self._lock:
            if event == "started":
                self.state[name], self.started[name] = "running", time.monotonic()
            elif event == "finished":
                self.state[name] = "done"
            if detail or event != "step":
                self.detail[name] = detail
        if self._live is not None:
            self._live.update(self._table())

    def _table(self) -> Table:
        counts = {s: sum(v == s for v in self.state.values()) for s in ("done", "running", "queued")}
        t = Table(title=f"ferry eval: {counts['done']} done, {counts['running']} running, {counts['queued']} queued")
        for col in ("case", "state", "step / result", "s"):
            t.add_column(col)
        now = time.monotonic()
        for name, state in self.state.items():
            if state == "queued":
                continue
            secs = f"{now - self.started.get(name, now):.0f}" if state == "running" else ""
            t.add_row(escape(name), state, escape(self.detail.get(name, "")), secs)
        return t
