"""torch.compile evidence: graph breaks (reason + user line) and recompiles, from dynamo's logs/counters."""

from __future__ import annotations

import logging
import re
from typing import Any

from .after_dynamo import after_dynamo_import

logger = logging.getLogger(__name__)

GRAPH_BREAK_LOGGERS = (
    "torch._dynamo.symbolic_convert.__graph_breaks",
    "torch._dynamo.convert_frame.__graph_breaks",
    "torch._dynamo.exc.__graph_breaks",
)
RECOMPILE_LOGGERS = ("torch._dynamo.guards.__recompiles",)
_FILE_LINE = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+)')
_AT = re.compile(r"(?:user code at|in) (?P<file>/[^\s:]+\.py):(?P<line>\d+)")
MAX_MESSAGES = 200


class _Collector(logging.Handler):
    def __init__(self, sink: list[dict[str, Any]], kind: str) -> None:
        super().__init__(logging.DEBUG)
        self.sink = sink
        self.kind = kind

    def emit(self, record: logging.LogRecord) -> None:
        if len(self.sink) >= MAX_MESSAGES:
            return
        try:
            self.sink.append({"kind": self.kind, "message": record.getMessage()})
        except Exception:
            pass


class DynamoWatch:
    """Collects graph-break and recompile log messages without printing them.

    Importing dynamo costs a second or two, which a program that never compiles must not pay in every
    profiled run: ``install`` attaches the collectors now only when ``torch._dynamo`` is imported already,
    and otherwise right after the program's own import of it (``torch.compile`` imports it before it
    compiles anything, so no graph break or recompile is missed)."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self._installed: list[tuple[logging.Logger, logging.Handler, int, bool]] = []
        self._enabled_artifact = False
        self._active = False

    def install(self) -> None:
        self._active = True
        after_dynamo_import(self._attach)

    def _attach(self) -> None:
        if not self._active:  # uninstalled before the program imported dynamo
            return
        try:  # import first: creating the artifact loggers resets their propagation
            import torch._dynamo.convert_frame
            import torch._dynamo.exc
            import torch._dynamo.guards
            import torch._dynamo.symbolic_convert  # noqa: F401
            from torch._logging._internal import log_state

            # dynamo formats recompile reasons only when the "recompiles" artifact is on
            if "recompiles" not in log_state.artifact_names:
                log_state.artifact_names.add("recompiles")
                self._enabled_artifact = True
        except Exception:  # an older/newer torch: counters still work
            logger.debug("profile: dynamo logs unavailable", exc_info=True)
        for names, kind in ((GRAPH_BREAK_LOGGERS, "graph_break"), (RECOMPILE_LOGGERS, "recompile")):
            for name in names:
                log = logging.getLogger(name)
                handler = _Collector(self.messages, kind)
                self._installed.append((log, handler, log.level, log.propagate))
                log.addHandler(handler)
                log.setLevel(logging.DEBUG)
                log.propagate = False

    def uninstall(self) -> None:
        self._active = False
        if self._enabled_artifact:
            from torch._logging._internal import log_state

            log_state.artifact_names.discard("recompiles")
            self._enabled_artifact = False
        for log, handler, level, propagate in self._installed:
            log.removeHandler(handler)
            log.setLevel(level)
            log.propagate = propagate
        self._installed = []

    def summary(self) -> dict[str, Any]:
        """Counters plus parsed messages; empty when torch.compile never ran."""
        import sys

        counters: dict[str, dict[str, int]] = {}
        if "torch._dynamo" in sys.modules:
            try:
                from torch._dynamo.utils import counters as dyn

                counters = {k: {str(r): int(n) for r, n in v.items()} for k, v in dyn.items()
                            if k in ("graph_break", "stats", "frames", "recompiles", "unimplemented")}
            except Exception:
                logger.debug("dynamo counters unavailable", exc_info=True)
        events = []
        seen: set[tuple[str, str]] = set()
        for m in self.messages:
            text = m["message"]
            key = (m["kind"], text[:300])
            if key in seen:
                continue
            seen.add(key)
            locations = [(x.group("file"), int(x.group("line")))
                         for x in (*_AT.finditer(text), *_FILE_LINE.finditer(text))]
            events.append({"kind": m["kind"], "message": text[:2000], "locations": locations})
        return {"counters": counters, "events": events}
