"""The probe's recording store: tensors copied to CPU, an ordered event index, a byte budget.

Layout of a dump directory::

    index.json          {"format", "meta", "events": [...], "scalars": {...}, "module_ops": {...}}
    chunk_00000.pt      torch.save({tensor_key: cpu_tensor, ...}) for the events of one flush

The index is rewritten atomically at every flush that has something new (each recorded
outermost call and step boundary, when the pending tensors pass a size threshold, and at exit),
so a crash keeps everything flushed before it.

Bounds: when the byte budget (``max_bytes``) or the event cap (``max_events``) is reached the
recorder stops (``stop``): it drops further tensors and markers, says why in the index
(``meta.stopped``), and the module hooks remove themselves, so the run goes on at full speed.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import weakref
from pathlib import Path
from typing import Any, Final

import torch

from ..guest import tpx_backend_module
from .config import ProbeConfig

# the original, kept before tools/probe/results.py wraps torch.save: the probe's own chunks are no
# save of the program's
_torch_save = torch.serialization.save

FORMAT: Final = "ferry-probe/1"
INDEX_NAME = "index.json"
FLUSH_PENDING_BYTES = 8 * 1024 * 1024
MAX_SCALAR_VALUES = 100_000
MAX_SCALAR_NAMES = 1_000  # distinct printed names (a program printing a dict per sample must not grow the index)


def _to_cpu_copy(t: torch.Tensor) -> torch.Tensor:
    """A detached, contiguous CPU copy; tpx tensors go through the zero-copy bridge when present."""
    t = t.detach()
    if t.device.type == "cpu":
        return t.clone(memory_format=torch.contiguous_format)
    if t.device.type not in ("cuda", "meta"):
        try:
            bridge = tpx_backend_module("bridge")  # the tpx backend, only inside a tpx run
            if bridge is not None:
                copy: torch.Tensor = bridge.to_cpu(t).clone(memory_format=torch.contiguous_format)
                return copy
        except Exception:  # fall back to an ordinary copy
            pass
    return t.to("cpu", copy=True).contiguous()


class Recorder:
    """Collects probe events; thread-safe enough for the hooks of one training process."""

    def __init__(self, config: ProbeConfig) -> None:
        self.config = config
        self.out_dir = Path(config.out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.events: list[dict[str, Any]] = []
        self.scalars: dict[str, list[float]] = {}
        # the optimizer step each printed value came after (the drift budget of a loss curve grows with it)
        self.scalar_steps: dict[str, list[int]] = {}
        self.optimizer_step = 0  # the module probe counts optimizer.step() calls here, for the whole run
        self.module_ops: dict[str, list[str]] = {}
        self.module_classes: dict[str, str] = {}
        self.meta: dict[str, Any] = {
            "format": FORMAT,
            "pid": os.getpid(),
            "started": time.time(),
            "config": config.as_json(),
        }
        self.bytes_written = 0
        self.bytes_dropped = 0
        self.dropped_events = 0
        self._pending: dict[str, torch.Tensor] = {}
        self._pending_bytes = 0
        self._chunk = 0
        self._seq = 0
        self._lock = threading.RLock()
        self._seen: dict[int, tuple[weakref.ref[torch.Tensor], int, str]] = {}
        self._explicit_calls: dict[str, int] = {}
        self._written_state: tuple[int, int, int, int, bool] | None = None
        self.discarded = False  # a launcher of the job's workers: it writes nothing more
        self.stopped: str | None = None  # why recording stopped (a budget was reached)
        self.closed = False

    def stop(self, reason: str) -> None:
        """Stop recording tensors and markers (scalars still count); the first reason is kept."""
        with self._lock:
            if self.stopped is None:
                self.stopped = reason
                self.meta["stopped"] = reason
                self.meta["stopped_at_seq"] = self._seq

    # ---------------------------------------------------------------- tensors
    def _lookup_seen(self, t: torch.Tensor) -> str | None:
        entry = self._seen.get(id(t))
        if entry is None:
            return None
        ref, version, key = entry
        if ref() is t and t._version == version:
            return key
        return None

    def add_tensor(self, key: str, tensor: torch.Tensor, fields: dict[str, Any],
                   stop_on_budget: bool = True) -> dict[str, Any] | None:
        """Record one tensor under ``key`` (unique); returns the event (``None`` once stopped).

        A tensor over the byte budget is listed without data; with ``stop_on_budget`` (module calls)
        the recording stops there, without it (a saved file, a final tensor: one large checkpoint
        must not end the recording of what follows) only that tensor goes without data."""
        with self._lock:
            if self.stopped is not None:
                return None
            if len(self.events) >= self.config.max_events:
                self.stop(f"event cap (FERRY_PROBE_MAX_EVENTS={self.config.max_events}) reached")
                return None
            event: dict[str, Any] = {
                "seq": self._seq,
                "key": key,
                "shape": list(tensor.shape),
                "dtype": str(tensor.dtype).removeprefix("torch."),
                "device": str(tensor.device),
                **fields,
            }
            self._seq += 1
            same = self._lookup_seen(tensor)
            if same is not None:
                event["same_as"] = same
            elif tensor.layout != torch.strided or tensor.device.type == "meta" or tensor.is_quantized:
                event["skipped"] = f"layout {tensor.layout} not recorded"
            else:
                nbytes = tensor.numel() * tensor.element_size()
                event["nbytes"] = nbytes
                if self.bytes_written + self._pending_bytes + nbytes > self.config.max_bytes:
                    event["skipped"] = "byte budget (FERRY_PROBE_MAX_BYTES) exhausted"
                    self.bytes_dropped += nbytes
                    self.dropped_events += 1
                    if stop_on_budget:
                        self.stop(f"byte budget (FERRY_PROBE_MAX_BYTES={self.config.max_bytes}) exhausted")
                else:
                    try:
                        self._pending[key] = _to_cpu_copy(tensor)
                    except Exception as exc:  # never break the user's run
                        event["skipped"] = f"copy failed: {type(exc).__name__}: {exc}"
                    else:
                        self._pending_bytes += nbytes
                        event["chunk"] = self._chunk_name(self._chunk)
                        # an inference tensor (torch.inference_mode: Lightning's validate/test) has no
                        # version counter, so an in-place change would go unseen: never deduplicated
                        if not tensor.is_inference():
                            try:
                                self._seen[id(tensor)] = (weakref.ref(tensor), tensor._version, key)
                            except TypeError:
                                pass
            self.events.append(event)
            if self._pending_bytes >= FLUSH_PENDING_BYTES:
                self.flush()
            return event

    def add_marker(self, fields: dict[str, Any]) -> None:
        """An event without tensor data (e.g. the end of a module call)."""
        with self._lock:
            if self.stopped is not None:
                return
            if len(self.events) >= self.config.max_events:
                self.stop(f"event cap (FERRY_PROBE_MAX_EVENTS={self.config.max_events}) reached")
                return
            self.events.append({"seq": self._seq, **fields})
            self._seq += 1

    def add_scalar(self, name: str, value: float) -> None:
        with self._lock:
            if name not in self.scalars and len(self.scalars) >= MAX_SCALAR_NAMES:
                return
            values = self.scalars.setdefault(name, [])
            if len(values) < MAX_SCALAR_VALUES:
                values.append(value)
                self.scalar_steps.setdefault(name, []).append(self.optimizer_step)

    def next_explicit_call(self, name: str) -> int:
        with self._lock:
            n = self._explicit_calls.get(name, 0)
            self._explicit_calls[name] = n + 1
            return n

    # ------------------------------------------------------------------- disk
    @staticmethod
    def _chunk_name(i: int) -> str:
        return f"chunk_{i:05d}.pt"

    def flush(self) -> None:
        """Write pending tensors as one chunk and rewrite the index atomically (only when something
        changed since the last write: the index grows with the run, rewriting it unchanged costs)."""
        if os.getpid() != self.meta["pid"] or self.discarded:
            return  # a forked child (e.g. a DataLoader worker) must not overwrite the parent's dump
        with self._lock:
            if self._pending:
                path = self.out_dir / self._chunk_name(self._chunk)
                _torch_save(self._pending, path)
                self.bytes_written += self._pending_bytes
                self._pending = {}
                self._pending_bytes = 0
                self._chunk += 1
            self._seen = {k: v for k, v in self._seen.items() if v[0]() is not None}
            state = (len(self.events), sum(len(v) for v in self.scalars.values()), len(self.module_ops),
                     len(self.module_classes), self.stopped is not None)
            if state == self._written_state and not self.closed:
                return
            self._write_index()
            self._written_state = state

    def _other_process_wrote(self) -> bool:
        """Another process's dump is in the directory while this one recorded nothing: a process
        of a multi-process job that ran no model (torchrun's launcher, multiprocessing's helpers)
        must not replace the dump of the one that did."""
        if self.events or self.scalars or self.module_ops or self._chunk:
            return False
        try:
            doc = json.loads((self.out_dir / INDEX_NAME).read_text())
        except (OSError, ValueError):
            return False
        return isinstance(doc, dict) and isinstance(doc.get("meta"), dict) and doc["meta"].get("pid") not in (
            None, self.meta["pid"])

    def _write_index(self) -> None:
        if self._other_process_wrote():
            return
        doc = {
            "format": FORMAT,
            "meta": {
                **self.meta,
                "bytes_written": self.bytes_written,
                "bytes_dropped": self.bytes_dropped,
                "dropped_events": self.dropped_events,
                "closed": self.closed,
            },
            "events": self.events,
            "scalars": self.scalars,
            "scalar_steps": self.scalar_steps,
            "module_ops": self.module_ops,
            "module_classes": self.module_classes,
        }
        tmp = self.out_dir / f"{INDEX_NAME}.{os.getpid()}.tmp"  # processes of one job share the dir
        tmp.write_text(json.dumps(doc, default=str))
        os.replace(tmp, self.out_dir / INDEX_NAME)

    def close(self, extra_meta: dict[str, Any] | None = None) -> None:
        with self._lock:
            if extra_meta:
                self.meta.update(extra_meta)
            self.meta["finished"] = time.time()
            self.closed = True
            self.flush()


# The active recorder lives on ``sys`` rather than in this module: the runner's bootstrap imports
# Ferry's ``tools`` in a private namespace and drops it from sys.modules afterwards, so user code
# that imports ``tools.probe`` later gets fresh module objects; they must still find the recorder.
_SYS_ATTR = "_ferry_probe_recorder"


def active() -> Recorder | None:
    return getattr(sys, _SYS_ATTR, None)


def set_active(recorder: Recorder | None) -> None:
    setattr(sys, _SYS_ATTR, recorder)
