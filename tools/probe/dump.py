"""Reading a probe dump directory back (index + tensor chunks).

The dump was written by a sandboxed run: every file is read through ``sandbox.artifacts`` (no
links, regular files only, size-capped), the index is validated (``tools.probe.index_model``) and
chunks are loaded with ``torch.load(weights_only=True)`` from the guarded bytes, after checking
that the archive holds only stored (uncompressed) entries no larger than the file itself.
"""

from __future__ import annotations

import io
import logging
import zipfile
from functools import cached_property
from pathlib import Path
from typing import Any

import torch

from sandbox.artifacts import ArtifactMissing, ArtifactRefused, read_bytes
from tools.artifact_json import InvalidArtifact, load_json, max_file_bytes, validate
from tools.probe.index_model import TENSOR_KINDS, ProbeEventDict, ProbeIndex, ProbeMeta
from tools.probe.recorder import FORMAT, INDEX_NAME

logger = logging.getLogger(__name__)

MAX_CHUNK_ENTRIES = 100_000
MAX_WARNINGS = 20  # per dump: the index (the run's) may name any number of keys that are not usable


class DumpError(ValueError):
    """The directory is not a readable probe dump."""


def _check_archive(data: bytes, name: str) -> None:
    """A torch.save archive whose entries cannot expand past the bytes read (no compression)."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            infos = zf.infolist()
    except (zipfile.BadZipFile, ValueError, OSError) as exc:
        raise DumpError(f"{name} is not a torch.save archive: {exc}") from None
    if len(infos) > MAX_CHUNK_ENTRIES:
        raise DumpError(f"{name} holds {len(infos)} entries; a probe chunk holds far fewer")
    if any(i.compress_type != zipfile.ZIP_STORED for i in infos) or sum(i.file_size for i in infos) > len(data):
        raise DumpError(f"{name} has compressed entries or entries larger than the file; probe chunks are "
                        "written uncompressed by torch.save")


class ProbeDump:
    """A probe dump: ordered events, scalar streams, per-module op lists; tensors loaded lazily."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        try:
            doc = load_json(self.path, INDEX_NAME)
        except ArtifactMissing:
            raise DumpError(f"{self.path} is not a probe dump (no {INDEX_NAME}): the run that should have "
                            "recorded it wrote none (its stderr's 'ferry bootstrap:' lines say why the probe did not "
                            "load; a run that left something else under that name has it in its artifacts_refused). "
                            "`ferry migrate` probes every run it compares; `ferry run` does with --probe") from None
        except ArtifactRefused as exc:
            raise DumpError(f"{self.path}: {INDEX_NAME} was not read: {exc.reason}") from None
        except InvalidArtifact as exc:
            raise DumpError(f"{self.path / INDEX_NAME}: {exc}") from None
        if isinstance(doc, dict) and doc.get("format") != FORMAT:
            raise DumpError(f"{self.path / INDEX_NAME} has format {str(doc.get('format'))[:80]!r}, expected {FORMAT!r}")
        try:
            index = validate(ProbeIndex, doc, INDEX_NAME)
        except InvalidArtifact as exc:
            raise DumpError(f"{self.path / INDEX_NAME}: {exc}") from None
        del doc  # validated: the parsed copy need not stay alongside the model and the dicts below
        self.meta: dict[str, Any] = index.meta_dict()
        self.events: list[ProbeEventDict] = index.event_dicts()
        self.scalars: dict[str, list[float]] = index.scalars
        self.module_ops: dict[str, list[str]] = index.module_ops
        self.module_classes: dict[str, str] = index.module_classes
        self._chunks: dict[str, dict[str, torch.Tensor]] = {}
        self._bad_chunks: dict[str, str] = {}  # read once: a chunk that failed is not read again per key
        self._warned = 0

    def _warn(self, msg: str, *args: object) -> None:
        self._warned += 1
        if self._warned <= MAX_WARNINGS:
            logger.warning("probe dump %s: " + msg, self.path, *args)
        elif self._warned == MAX_WARNINGS + 1:
            logger.warning("probe dump %s: more tensors are not usable; not warning about each", self.path)

    @cached_property
    def tensor_events(self) -> dict[str, ProbeEventDict]:
        return {e["key"]: e for e in self.events if e.get("kind") in TENSOR_KINDS}

    def _chunk(self, name: str) -> dict[str, torch.Tensor]:
        if name in self._bad_chunks:
            raise DumpError(self._bad_chunks[name])
        if name not in self._chunks:
            try:
                self._chunks[name] = self._load_chunk(name)
            except DumpError as exc:
                self._bad_chunks[name] = str(exc)  # the message only: the traceback holds the chunk's bytes
                raise
        return self._chunks[name]

    def _load_chunk(self, name: str) -> dict[str, torch.Tensor]:
        try:
            data = read_bytes(self.path, name, max_bytes=max_file_bytes())
        except ArtifactMissing:
            raise DumpError(f"{self.path / name} is missing (the run may have been killed before it was "
                            "written)") from None
        except ArtifactRefused as exc:
            raise DumpError(f"{self.path}: {name} was not read: {exc.reason}") from None
        _check_archive(data, name)
        try:
            loaded = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
        except Exception as exc:  # any unpickling failure of a forged chunk
            raise DumpError(f"{self.path / name} cannot be loaded: {type(exc).__name__}: {str(exc)[:200]}") from None
        if not isinstance(loaded, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor)
                                                   for k, v in loaded.items()):
            raise DumpError(f"{self.path / name} does not hold a mapping of tensor keys to tensors")
        return loaded

    def tensor(self, key: str, _depth: int = 0) -> torch.Tensor | None:
        """The recorded tensor for ``key``; ``None`` when it was skipped (budget, layout) or its data
        is missing or does not match what the index says was recorded."""
        event = self.tensor_events.get(key)
        if event is None:
            raise KeyError(key)
        if "same_as" in event and _depth < 64:
            if event["same_as"] not in self.tensor_events:
                self._warn("%s refers to %s, which is not recorded", key, event["same_as"])
                return None
            return self.tensor(event["same_as"], _depth + 1)
        chunk = event.get("chunk")
        if chunk is None:
            return None
        try:
            t = self._chunk(chunk).get(key)
        except DumpError as exc:
            self._warn("%s: %s", key, exc)
            return None
        if t is not None and (list(t.shape) != event.get("shape")
                              or str(t.dtype).removeprefix("torch.") != event.get("dtype")):
            self._warn("%s holds a %s %s tensor, the index says %s %s", key, str(t.dtype).removeprefix("torch."),
                       list(t.shape), event.get("dtype"), event.get("shape"))
            return None
        return t

    def module_calls(self) -> list[ProbeEventDict]:
        """Module-call markers in completion order (innermost modules finish first)."""
        return [e for e in self.events if e.get("kind") == "module_end"]


def files_run(path: Path | str) -> list[str]:
    """The repository files the run of the dump at ``path`` executed, in the order it began them
    (``meta.files_run``); empty when there is no readable dump or it does not say."""
    try:
        doc = load_json(Path(path), INDEX_NAME)
    except (ArtifactMissing, ArtifactRefused, InvalidArtifact):
        return []
    meta = doc.get("meta") if isinstance(doc, dict) and doc.get("format") == FORMAT else None
    try:
        return validate(ProbeMeta, meta, f"{INDEX_NAME} meta").files_run if isinstance(meta, dict) else []
    except InvalidArtifact as exc:
        logger.warning("probe dump %s: %s", path, exc)
        return []
