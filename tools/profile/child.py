"""Profiler installation in the target run (``FERRY_PROFILE_DIR``) or in-process.

Collects for a bounded window of steps (after ``FERRY_PROFILE_WARMUP`` steps, for
``FERRY_PROFILE_STEPS`` steps; same step rule as the probe): a torch.profiler window with a
Chrome trace and op table; for the whole run: host syncs and H2D copies with source lines,
tpx op statistics, dynamo graph breaks and recompiles. Writes ``profile.json`` (and
``trace.json``) into the directory at exit.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch.nn.modules import module as nn_module
from torch.optim import optimizer as optim_mod

from .config import ProfileConfig, config_from_env
from .device_ops import DeviceOpCounter
from .dynamo_watch import DynamoWatch
from .frames import FrameFinder
from .syncs import SyncTracker
from .tpx_stats import read_tpx_stats, reset_tpx_stats

logger = logging.getLogger(__name__)

PROFILE_JSON = "profile.json"
TRACE_JSON = "trace.json"
TOP_OPS = 40


class ProfileSession:
    def __init__(self, config: ProfileConfig) -> None:
        self.config = config
        self.out_dir = Path(config.out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.syncs = SyncTracker(FrameFinder(config.repo_root))
        self.dynamo = DynamoWatch()
        self.depth = 0
        self.root_calls = 0
        self.optimizer_steps = 0
        self._handles: list[Any] = []
        self._prof: torch.profiler.profile | None = None
        self._window: dict[str, Any] = {"start_step": None, "end_step": None, "wall_s": None}
        self._window_t0 = 0.0
        self._tpx_at_start: dict[str, Any] | None = None
        self._tpx_window: dict[str, Any] | None = None
        self._ops: list[dict[str, Any]] = []
        self.device_ops = DeviceOpCounter()
        self._device_ops_scope = "run"
        self.closed = False

    @property
    def step(self) -> int:
        return self.optimizer_steps if self.optimizer_steps else max(self.root_calls - 1, 0)

    # ---------------------------------------------------------------- install
    def install(self) -> ProfileSession:
        reset_tpx_stats()
        self._handles = [
            nn_module.register_module_forward_pre_hook(self._pre),
            nn_module.register_module_forward_hook(self._post, always_call=True),
            optim_mod.register_optimizer_step_post_hook(self._opt),
        ]
        if self.config.track_syncs:
            self.syncs.install()
        self.dynamo.install()
        self.device_ops.start()
        if self.config.warmup_steps == 0:
            self._start_window()
        return self

    def _pre(self, module: Any, args: Any) -> None:
        if torch.compiler.is_compiling():
            return
        if self.depth == 0:
            self.root_calls += 1
            self._on_step()
        self.depth += 1

    def _post(self, module: Any, args: Any, out: Any) -> None:
        if torch.compiler.is_compiling():
            return
        self.depth = max(self.depth - 1, 0)

    def _opt(self, *args: Any) -> None:
        self.optimizer_steps += 1
        self._on_step()

    def _on_step(self) -> None:
        step = self.step
        if self._prof is None and self._window["start_step"] is None and step >= self.config.warmup_steps:
            self._start_window()
        elif self._prof is not None and step >= self._window["start_step"] + self.config.steps:
            self._stop_window()

    # ----------------------------------------------------------------- window
    def _start_window(self) -> None:
        activities = [torch.profiler.ProfilerActivity.CPU]
        try:
            self._prof = torch.profiler.profile(activities=activities, record_shapes=False, with_stack=False)
            self._prof.__enter__()  # type: ignore[no-untyped-call]  # untyped in torch
        except Exception:  # e.g. a profiler already running in the user's code
            logger.warning("profile: torch.profiler could not start; op table will come from tpx stats only",
                           exc_info=True)
            self._prof = None
        self._window["start_step"] = self.step
        self._window_t0 = time.perf_counter()
        self.syncs.in_window = True
        stats = read_tpx_stats()
        self._tpx_at_start = stats if stats else None

    def _stop_window(self) -> None:
        self.device_ops.stop()  # counted from the start through the window: its cost stays bounded
        self._device_ops_scope = "through_window"
        self.syncs.in_window = False
        self._window["end_step"] = self.step
        self._window["wall_s"] = time.perf_counter() - self._window_t0
        stats = read_tpx_stats()
        self._tpx_window = _diff_stats(self._tpx_at_start, stats if stats else None)
        prof, self._prof = self._prof, None
        if prof is None:
            return
        try:
            prof.__exit__(None, None, None)  # type: ignore[no-untyped-call]  # untyped in torch
            if self.config.trace:
                prof.export_chrome_trace(str(self.out_dir / TRACE_JSON))
            self._ops = _op_table(prof)
        except Exception:
            logger.warning("profile: could not read the torch.profiler window", exc_info=True)

    # ------------------------------------------------------------------ close
    def close(self, write: bool = True) -> None:
        """Stop profiling and write ``profile.json`` (``write=False``: nothing; the bootstrap's for
        ``torch.multiprocessing.spawn``'s parent, whose workers' profiles are the run's)."""
        if self.closed:
            return
        self.closed = True
        if self._prof is not None:
            self._stop_window()
        self.device_ops.stop()
        for h in self._handles:
            h.remove()
        self._handles = []
        self.syncs.uninstall()
        self.dynamo.uninstall()
        if not write:
            return
        stats = read_tpx_stats()
        window = dict(self._window)
        if window["start_step"] is not None and window["end_step"] is not None:
            window["steps"] = max(window["end_step"] - window["start_step"], 1)
        doc = {
            "format": "ferry-profile/1",
            "repo_root": str(self.config.repo_root),
            "config": self.config.as_json(),
            "steps_seen": self.step,
            "window": window,
            "ops": self._ops,
            "syncs": self.syncs.rows(),
            "tpx": stats if stats else None,
            "tpx_window": self._tpx_window,
            "device_ops": self.device_ops.snapshot(),
            "device_ops_scope": self._device_ops_scope,
            "dynamo": self.dynamo.summary(),
            "matmul_precision": torch.get_float32_matmul_precision(),
            "trace": TRACE_JSON if (self.out_dir / TRACE_JSON).is_file() else None,
        }
        tmp = self.out_dir / (PROFILE_JSON + ".tmp")
        tmp.write_text(json.dumps(doc, indent=1, default=str))
        os.replace(tmp, self.out_dir / PROFILE_JSON)


def _diff_stats(before: dict[str, Any] | None, after: dict[str, Any] | None) -> dict[str, Any] | None:
    """tpx counters accumulated inside the window."""
    if after is None:
        return None
    before = before or {}
    prev = {o["op"]: o for o in before.get("ops", [])}
    ops = []
    for o in after.get("ops", []):
        p = prev.get(o["op"], {})
        row = {"op": o["op"], "count": o["count"] - p.get("count", 0), "time_s": o["time_s"] - p.get("time_s", 0.0),
               "fallback_calls": o["fallback_calls"] - p.get("fallback_calls", 0)}
        if row["count"] > 0:
            ops.append(row)
    out = {k: after.get(k, 0) - before.get(k, 0)
           for k in ("d2h_syncs", "h2d_copies", "d2h_copies", "bytes_h2d", "bytes_d2h")}
    out["ops"] = sorted(ops, key=lambda r: (-r["time_s"], -r["count"]))
    out["fallback_ops"] = sorted({r["op"] for r in ops if r["fallback_calls"]})
    return out


def _op_table(prof: torch.profiler.profile) -> list[dict[str, Any]]:
    """The window's ops by self CPU time (top ``TOP_OPS * 4``): what ``prof.key_averages()`` tabulates, read
    from the profiler's events directly (:func:`_rows_from_events`); ``key_averages()`` itself where that
    cannot be (a profiler with a device activity)."""
    try:
        rows = _rows_from_events(prof)
    except Exception:  # torch's events not as this reads them: its own table
        logger.debug("profile: op table from key_averages()", exc_info=True)
        rows = None
    if rows is None:
        rows = []
        for evt in prof.key_averages():
            rows.append({
                "op": evt.key,
                "count": int(evt.count),
                "self_cpu_us": float(evt.self_cpu_time_total),
                "cpu_total_us": float(evt.cpu_time_total),
                "device_us": float(getattr(evt, "self_device_time_total", 0.0) or 0.0),
            })
    rows.sort(key=lambda r: -r["self_cpu_us"])
    return rows[:TOP_OPS * 4]


class _Event:
    """One profiler event as ``key_averages()`` counts it (torch's ``FunctionEvent``, without the rest)."""

    __slots__ = ("children", "cpu", "end", "is_async", "name", "parent", "start", "thread")

    def __init__(self, name: str, start: float, end: float, thread: int, cpu: bool, is_async: bool) -> None:
        self.name, self.start, self.end, self.thread = name, start, end, thread
        self.cpu, self.is_async = cpu, is_async
        self.children: list[_Event] = []
        self.parent: _Event | None = None

    @property
    def total(self) -> float:
        return self.end - self.start if self.cpu else 0.0


def _rows_from_events(prof: torch.profiler.profile) -> list[dict[str, Any]] | None:
    """The op table ``key_averages()`` gives for a CPU-only window, worked out from the profiler's own events:
    ``key_averages()`` first builds a Python object per event with everything it recorded (shapes, stacks,
    memory), 1-1.5 s for the 28,000 events of three LSTM training steps, on the run's way. The same rules as
    torch 2.13's ``_parse_kineto_results`` and ``EventList._build_tree``: its filtered names and step wildcard,
    async events (or ones ending on another thread) outside the nesting, a CPU event's parent the innermost one
    of its thread that holds it, a lone child named as its parent folded into it, self time the total less the
    children's. None where it does not apply (a device activity or a device runtime event, or torch's internals not
    as expected)."""
    try:
        from torch._C._autograd import DeviceType
        from torch.autograd.profiler_util import _filter_name, _rewrite_name

        if getattr(prof, "use_device", None) or prof.profiler is None:
            return None
        result = prof.profiler.kineto_results
        if result is None:
            return None
        trace_start = result.trace_start_ns()
        raw = result.events()
    except Exception:
        return None
    events: list[_Event] = []
    for k in raw:
        name = k.name()
        if _filter_name(name) or k.is_hidden_event():  # type: ignore[no-untyped-call]  # untyped in torch
            continue
        if k.linked_correlation_id() > 0:  # a device runtime call, which torch nests under the op that made it
            return None  # (not in a CPU-only window: key_averages() itself then)
        cpu = k.device_type() == DeviceType.CPU
        start_thread = k.start_thread_id()
        is_async = k.is_async() or start_thread != k.end_thread_id()
        key = _rewrite_name(name=name, with_wildcard=True)  # type: ignore[no-untyped-call]  # untyped in torch
        events.append(_Event(key, (k.start_ns() - trace_start) / 1000,
                             (k.end_ns() - trace_start) / 1000, start_thread, cpu, is_async))
    by_thread: dict[int, list[_Event]] = {}
    for evt in events:
        if evt.cpu and not evt.is_async:
            by_thread.setdefault(evt.thread, []).append(evt)
    for group in by_thread.values():
        group.sort(key=lambda e: (e.start, -e.end))
        stack: list[_Event] = []
        for evt in group:
            while stack:
                parent = stack[-1]
                if evt.start >= parent.end or evt.end > parent.end:
                    stack.pop()
                else:
                    parent.children.append(evt)
                    evt.parent = parent
                    break
            stack.append(evt)
    kept = _fold_lone_namesakes(events)
    rows: dict[str, dict[str, Any]] = {}
    for evt in kept:
        row = rows.setdefault(evt.name, {"op": evt.name, "count": 0, "self_cpu_us": 0.0, "cpu_total_us": 0.0,
                                         "device_us": 0.0})
        row["count"] += 1
        row["cpu_total_us"] += evt.total
        if evt.cpu and not evt.is_async:
            row["self_cpu_us"] += evt.total - sum(c.total for c in evt.children)
    return list(rows.values())


def _fold_lone_namesakes(events: list[_Event]) -> list[_Event]:
    """torch's ``_remove_dup_nodes``: an event that is its parent's only child and has its name is dropped, its
    children going to the parent; repeated until none is left."""
    while True:
        drop = {id(e) for e in events if e.parent is not None and e.parent.name == e.name
                and len(e.parent.children) == 1}
        if not drop:
            return events
        for evt in events:
            if id(evt) in drop and evt.parent is not None:
                evt.parent.children = evt.children
                for child in evt.children:
                    child.parent = evt.parent
        events = [e for e in events if id(e) not in drop]


@contextmanager
def profile_session(out_dir: Path | str, repo_root: Path | str, **settings: Any) -> Iterator[ProfileSession]:
    """In-process: ``with profile_session(dir, repo_root): train()`` writes ``profile.json`` to ``dir``."""
    session = ProfileSession(ProfileConfig(out_dir=Path(out_dir), repo_root=Path(repo_root), **settings)).install()
    try:
        yield session
    finally:
        session.close()


_CHILD: ProfileSession | None = None


def install_from_env() -> ProfileSession | None:
    """Called by the runner's bootstrap when ``FERRY_PROFILE_DIR`` is set."""
    global _CHILD
    if _CHILD is not None:
        return _CHILD
    config = config_from_env()
    if config is None:
        return None
    _CHILD = ProfileSession(config).install()
    atexit.register(_CHILD.close)
    return _CHILD


def discard_from_env() -> None:
    """The bootstrap's: this process launched the job's workers (``torch.multiprocessing.spawn``);
    it writes no profile of its own over theirs."""
    if _CHILD is not None:
        _CHILD.close(write=False)
