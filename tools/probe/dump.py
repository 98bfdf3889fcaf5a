"""Reading a probe dump directory back (index + tensor chunks)."""

from __future__ import annotations

import json
import logging
from functools import cached_property
from pathlib import Path
from typing import Any

import torch

from tools.probe.recorder import FORMAT, INDEX_NAME

logger = logging.getLogger(__name__)


class DumpError(ValueError):
    """The directory is not a readable probe dump."""


class ProbeDump:
    """A probe dump: ordered events, scalar streams, per-module op lists; tensors loaded lazily."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        index = self.path / INDEX_NAME
        if not index.is_file():
            raise DumpError(f"{self.path} is not a probe dump (no {INDEX_NAME}); run with --probe first")
        try:
            doc = json.loads(index.read_text())
        except json.JSONDecodeError as exc:
            raise DumpError(f"{index} is not valid JSON: {exc}") from exc
        if doc.get("format") != FORMAT:
            raise DumpError(f"{index} has format {doc.get('format')!r}, expected {FORMAT!r}")
        self.meta: dict[str, Any] = doc.get("meta", {})
        self.events: list[dict[str, Any]] = doc.get("events", [])
        self.scalars: dict[str, list[float]] = doc.get("scalars", {})
        self.module_ops: dict[str, list[str]] = doc.get("module_ops", {})
        self.module_classes: dict[str, str] = doc.get("module_classes", {})
        self._chunks: dict[str, dict[str, torch.Tensor]] = {}

    @cached_property
    def tensor_events(self) -> dict[str, dict[str, Any]]:
        return {e["key"]: e for e in self.events if e.get("kind") in ("module_input", "module_output", "record")}

    def _chunk(self, name: str) -> dict[str, torch.Tensor]:
        if name not in self._chunks:
            path = self.path / name
            if not path.is_file():
                raise DumpError(f"{path} is missing (the run may have been killed before it was written)")
            self._chunks[name] = torch.load(path, map_location="cpu", weights_only=True)
        return self._chunks[name]

    def tensor(self, key: str, _depth: int = 0) -> torch.Tensor | None:
        """The recorded tensor for ``key``; ``None`` when it was skipped (budget, layout)."""
        event = self.tensor_events.get(key)
        if event is None:
            raise KeyError(key)
        if "same_as" in event and _depth < 64:
            return self.tensor(event["same_as"], _depth + 1)
        chunk = event.get("chunk")
        if chunk is None:
            return None
        try:
            return self._chunk(chunk).get(key)
        except DumpError:
            logger.warning("probe dump %s: %s", self.path, key, exc_info=True)
            return None

    def module_calls(self) -> list[dict[str, Any]]:
        """Module-call markers in completion order (innermost modules finish first)."""
        return [e for e in self.events if e.get("kind") == "module_end"]
